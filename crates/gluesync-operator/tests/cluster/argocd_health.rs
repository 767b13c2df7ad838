//! The Argo CD health check of `deploy/argocd/health.lua`, run by a real Lua 5.1 (the dialect of Argo CD's
//! gopher-lua) the way Argo CD runs it: the resource as the global `obj`, the script's chunk returning
//! `{status, message}`. Only the base library is open, which proves the script needs nothing that
//! `resource.customizations.useOpenLibs` would add.
//!
//! The GluesyncPlatforms are built with GKO's own types and, where GKO computes a status without I/O, by
//! GKO's own code (`status::idle`, `update::decide`), so the fixtures carry the conditions, reasons and
//! messages GKO writes. Each fixture's verdict must also agree with `kubectl wait --for=condition=Ready`.

use crate::argocd;

use argocd::{HEALTH_LUA, argocd_health, base_lua};
use gluesync_operator::{
    api::{
        Attempt, GluesyncPlatform, GluesyncPlatformSpec, Step, UpdatePolicy, UpdateResult,
        WorkloadKind,
    },
    update::corehub::Report,
    update::observed::Workload,
    update::{
        self, Observed,
        access::Access,
        status::{self, READY, RECONCILING, STALLED},
    },
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Value, json};

const ARGOCD_CM: &str = include_str!("../../../../deploy/argocd/argocd-cm.yaml");
const ARGOCD_DOC: &str = include_str!("../../../../docs/argocd.md");
const HEALTH_KEY: &str = "resource.customizations.health.gluesync.molo17.com_GluesyncPlatform";

const CORE_HUB: &str = "gluesync-gluesync-core-hub";
const CHRONOS: &str = "gluesync-gluesync-chronos";

// ---------------------------------------------------------------------------------------------------
// Argo CD's side: the Lua VM, and `kubectl wait`'s rule.

/// `kubectl wait --for=condition=Ready`: the first condition whose type is Ready (case-insensitive) and
/// that has a status decides; it is not met while its `observedGeneration` (else the status's) is below
/// `metadata.generation`. (kubectl's `pkg/cmd/wait/condition.go`.)
fn kubectl_wait_ready(obj: &Value) -> bool {
    let Some(conditions) = obj.pointer("/status/conditions").and_then(Value::as_array) else {
        return false;
    };
    let generation = obj.pointer("/metadata/generation").and_then(Value::as_i64);
    for c in conditions {
        if !c["type"]
            .as_str()
            .is_some_and(|t| t.eq_ignore_ascii_case(READY))
        {
            continue;
        }
        let Some(status) = c["status"].as_str() else {
            continue;
        };
        if let Some(generation) = generation {
            let observed = c["observedGeneration"].as_i64().or_else(|| {
                obj.pointer("/status/observedGeneration")
                    .and_then(Value::as_i64)
            });
            if observed.is_some_and(|o| o < generation) {
                return false;
            }
        }
        return status.eq_ignore_ascii_case("True");
    }
    false
}

// ---------------------------------------------------------------------------------------------------
// The GluesyncPlatforms, as GKO writes them.

fn now() -> Time {
    Time("2026-09-01T10:00:00Z".parse().expect("a timestamp"))
}

fn platform(version: &str, generation: i64) -> GluesyncPlatform {
    let spec: GluesyncPlatformSpec =
        serde_json::from_value(json!({ "version": version })).expect("a spec");
    let mut g = GluesyncPlatform::new("gluesync", spec);
    g.metadata.namespace = Some("gluesync".into());
    g.metadata.generation = Some(generation);
    g
}

fn workload(kind: WorkloadKind, name: &str, label: &str, image: &str) -> Workload {
    Workload {
        kind,
        container: Some("main".into()),
        pods: vec![],
        ..gluesync_operator::update::fixtures::workload(name, label, image)
    }
}

/// The workloads of the Gluesync Kubernetes kit, with Core Hub at `core_hub`.
fn kit(core_hub: &str) -> Vec<Workload> {
    use WorkloadKind::{Deployment, StatefulSet};
    vec![
        workload(
            StatefulSet,
            CORE_HUB,
            "core-hub",
            &format!("molo17/gluesync-core-hub:{core_hub}"),
        ),
        workload(
            StatefulSet,
            CHRONOS,
            "module",
            "molo17/gluesync-chronos:0.3.2",
        ),
        workload(
            Deployment,
            "gluesync-gluesync-grafana",
            "third-party",
            "grafana/grafana:11.2.0",
        ),
        workload(
            Deployment,
            "gluesync-gluesync-prometheus",
            "third-party",
            "prom/prometheus:2.53.0",
        ),
        workload(
            Deployment,
            "gluesync-gluesync-operator",
            "operator",
            "molo17/gluesync-operator:0.1.0",
        ),
    ]
}

/// The status GKO writes when no update runs (`status::idle`).
fn idle(mut g: GluesyncPlatform, workloads: &[Workload]) -> GluesyncPlatform {
    g.status = Some(status::idle(&g, workloads, &now()));
    g
}

/// The status of GKO's next decision (`update::decide`), with Core Hub not answered yet.
fn decided(g: &GluesyncPlatform, workloads: &[Workload]) -> GluesyncPlatform {
    let report = Report::default();
    let obs = Observed {
        now: now(),
        workloads,
        corehub: &report,
        catalog: None,
        target: None,
        access_problem: Access::default().problem(g, workloads, "gluesync"),
        me: None,
        dr: Default::default(),
        pre_pulls: &[],
    };
    let mut out = g.clone();
    out.status = Some(update::decide(g, &obs).status);
    out
}

/// The last update, as `status.lastAttempt` records it, for generation `generation`.
fn with_attempt(
    mut g: GluesyncPlatform,
    result: UpdateResult,
    message: &str,
    generation: i64,
) -> GluesyncPlatform {
    let status = g.status.get_or_insert_with(Default::default);
    status.last_attempt = Some(Attempt {
        target: Some(g.spec.version.clone()),
        request_id: None,
        requested_by: None,
        generation: Some(generation),
        result,
        message: message.into(),
        started_at: Some(now()),
        finished_at: now(),
        results: vec![],
        paused_pipelines: Default::default(),
        resumed_pipelines: Default::default(),
    });
    g
}

/// The conditions of an update in flight, as GKO's `mark_updating` writes them.
fn in_flight(
    previous: &[Condition],
    step: &Step,
    message: &str,
    generation: i64,
) -> Vec<Condition> {
    let reason = format!("Update{:?}", step.name());
    [
        (READY, false, "UpdateInProgress"),
        (RECONCILING, true, reason.as_str()),
        (STALLED, false, "UpdateInProgress"),
    ]
    .into_iter()
    .map(|(t, v, r)| status::condition(previous, t, v, r, message, generation, &now()))
    .collect()
}

/// `started` (an update GKO has just started) moved on to `step`, with the message GKO writes there.
fn at_step(started: &GluesyncPlatform, step: Step, message: &str) -> GluesyncPlatform {
    let mut g = started.clone();
    let generation = g.metadata.generation.unwrap_or_default();
    let status = g.status.as_mut().expect("a status");
    status.message = Some(message.into());
    status.conditions = in_flight(&status.conditions, &step, message, generation);
    status.update.as_mut().expect("an update").step = step;
    g
}

fn cond(type_: &str, status: &str, reason: &str, message: &str, generation: i64) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: Some(generation),
        last_transition_time: now(),
    }
}

/// A current install (generation 1, Core Hub 2.3.2.1) whose conditions are replaced by `conditions`.
fn current_with(conditions: Vec<Condition>) -> GluesyncPlatform {
    let mut g = idle(platform("2.3.2.1", 1), &kit("2.3.2.1"));
    g.status.as_mut().expect("a status").conditions = conditions;
    g
}

struct Fixture {
    name: &'static str,
    object: Value,
    status: &'static str,
    message: String,
}

fn fixture(
    name: &'static str,
    g: &GluesyncPlatform,
    status: &'static str,
    message: &str,
) -> Fixture {
    Fixture {
        name,
        object: serde_json::to_value(g).expect("the GluesyncPlatform serializes"),
        status,
        message: message.into(),
    }
}

/// An update of Core Hub from 2.3.2.1 to 2.3.2.2 that GKO has just started (generation 2).
fn started_update() -> GluesyncPlatform {
    let before = idle(platform("2.3.2.1", 1), &kit("2.3.2.1"));
    let mut g = platform("2.3.2.2", 2);
    g.status = before.status;
    decided(&g, &kit("2.3.2.1"))
}

fn step(name: &str) -> Step {
    let since = "2026-09-01T10:00:00Z";
    let deadline = "2026-09-01T10:10:00Z";
    serde_json::from_value(json!({ "step": name, "since": since, "deadline": deadline }))
        .expect("a step")
}

fn fixtures() -> Vec<Fixture> {
    let mut out = vec![];
    let running = "Running 2.3.2.1 (update policy ui)";

    // Before GKO has written anything.
    out.push(fixture(
        "no status",
        &platform("2.3.2.1", 1),
        "Progressing",
        "Waiting for gluesync-operator to report status",
    ));
    let mut g = platform("2.3.2.1", 1);
    g.status = Some(Default::default());
    g.status.as_mut().expect("a status").observed_generation = Some(1);
    out.push(fixture(
        "status without conditions",
        &g,
        "Progressing",
        "Waiting for gluesync-operator to report status",
    ));

    // Idle.
    let current = idle(platform("2.3.2.1", 1), &kit("2.3.2.1"));
    out.push(fixture("Current", &current, "Healthy", running));
    let mut g = platform("2.3.2.1", 1);
    g.spec.update_policy = UpdatePolicy::Gitops;
    out.push(fixture(
        "Current, gitops policy",
        &idle(g, &kit("2.3.2.1")),
        "Healthy",
        "Running 2.3.2.1 (update policy gitops)",
    ));
    let mut g = platform("2.3.2.1", 1);
    g.status = Some(Default::default());
    g.status.as_mut().expect("a status").available = Some("2.3.2.2".into());
    out.push(fixture(
        "UpdateAvailable",
        &idle(g, &kit("2.3.2.1")),
        "Healthy",
        "Running 2.3.2.1 (update policy ui); Core Hub 2.3.2.2 available",
    ));
    let mut g = platform("2.3.2.1", 1);
    g.status = Some(Default::default());
    g.status.as_mut().expect("a status").available = Some("2.3.2.1".into());
    out.push(fixture(
        "Current, the catalog's latest already runs",
        &idle(g, &kit("2.3.2.1")),
        "Healthy",
        running,
    ));
    let mut stale = current.clone();
    stale.metadata.generation = Some(2);
    out.push(fixture(
        "stale generation (a sync changed the spec)",
        &stale,
        "Progressing",
        "Spec generation 2 not yet observed (observed 1)",
    ));
    let mut w = kit("2.3.2.1");
    w[1].ready = false;
    out.push(fixture(
        "WorkloadNotReady",
        &idle(platform("2.3.2.1", 1), &w),
        "Progressing",
        "WorkloadNotReady: not ready: gluesync-gluesync-chronos",
    ));
    let drifted = with_attempt(
        platform("2.3.2.2", 2),
        UpdateResult::Succeeded,
        "update finished",
        2,
    );
    out.push(fixture(
        "VersionDrift (Core Hub's image changed by hand)",
        &idle(drifted, &kit("2.3.2.1")),
        "Degraded",
        "VersionDrift: spec.version asks for Core Hub 2.3.2.2 and 2.3.2.1 runs; set a new \
         spec.requestID to update",
    ));
    let w: Vec<Workload> = kit("2.3.2.1").into_iter().skip(1).collect();
    out.push(fixture(
        "CoreHubNotFound",
        &idle(platform("2.3.2.1", 1), &w),
        "Degraded",
        "CoreHubNotFound: no StatefulSet or Deployment in namespace gluesync carries the label \
         com.molo17.conductor.type=core-hub",
    ));
    let mut w = kit("2.3.2.1");
    let mut second = w[0].clone();
    second.name = "gluesync-gluesync-core-hub-2".into();
    w.push(second);
    out.push(fixture(
        "MultipleCoreHubs",
        &idle(platform("2.3.2.1", 1), &w),
        "Degraded",
        "MultipleCoreHubs: 2 workloads carry the label com.molo17.conductor.type=core-hub \
         (gluesync-gluesync-core-hub, gluesync-gluesync-core-hub-2); exactly one must",
    ));
    let mut w = kit("2.3.2.1");
    w[1].container = None;
    out.push(fixture(
        "ContainerNotFound",
        &idle(platform("2.3.2.1", 1), &w),
        "Degraded",
        "ContainerNotFound: StatefulSet gluesync-gluesync-chronos has no container named by its \
         annotation gluesync.molo17.com/container",
    ));
    let mut w = kit("2.3.2.1");
    w.push(workload(
        WorkloadKind::StatefulSet,
        "gluesync-postgres",
        "database",
        "postgres:16.4",
    ));
    out.push(fixture(
        "UnknownComponentType",
        &idle(platform("2.3.2.1", 1), &w),
        "Degraded",
        "UnknownComponentType: StatefulSet gluesync-postgres has com.molo17.conductor.type=\"database\"; \
         known values are core-hub, agent, module, third-party and operator",
    ));
    let mut g = current.clone();
    g.spec.core_hub.credentials_secret = Some("admin-credentials".into());
    out.push(fixture(
        "SecretNotAllowed",
        &decided(&g, &kit("2.3.2.1")),
        "Degraded",
        "SecretNotAllowed: spec.coreHub.credentialsSecret names Secret admin-credentials, which this \
         GKO may not read (it may read: none); GKO reads nothing and calls no Core Hub until the spec \
         or GKO's settings change",
    ));
    let mut g = current.clone();
    g.spec.core_hub.url = Some("https://collector.example.com".into());
    out.push(fixture(
        "CoreHubURLNotAllowed",
        &decided(&g, &kit("2.3.2.1")),
        "Degraded",
        "CoreHubURLNotAllowed: spec.coreHub.url https://collector.example.com is not a Core Hub URL \
         this GKO may send credentials to (the Core Hub workload's Service); GKO calls no Core Hub \
         until the spec or GKO's settings change",
    ));
    let mut g = current.clone();
    g.status.as_mut().expect("a status").paused_pipelines = vec!["p1", "p2"].into();
    out.push(fixture(
        "PipelinesNotResumed (between updates)",
        &decided(&g, &kit("2.3.2.1")),
        "Progressing",
        "PipelinesNotResumed: 2 pipelines GKO put into maintenance mode are not resumed yet; GKO \
         keeps asking Core Hub to resume them: p1, p2",
    ));

    // An update of Core Hub 2.3.2.1 → 2.3.2.2, step by step.
    let started = started_update();
    let arrow = "(2.3.2.1 → 2.3.2.2, step";
    out.push(fixture(
        "update: Preflight (just started)",
        &started,
        "Progressing",
        &format!(
            "UpdatePreflight: update of Core Hub from 2.3.2.1 to 2.3.2.2 started, asked by a change \
             of the GluesyncPlatform {arrow} Preflight)"
        ),
    ));
    for (name, label, message) in [
        (
            "Snapshot",
            "update: Snapshot",
            "preflight passed; recording the images of every component",
        ),
        (
            "Drain",
            "update: Drain",
            "waiting for 12 of 300 pipelines to reach maintenance mode",
        ),
        (
            "CoreHub",
            "update: CoreHub",
            "waiting for Core Hub 2.3.2.2 to stay ready for 60 s",
        ),
        (
            "CoreHubRollback",
            "update: CoreHubRollback",
            "rolling Core Hub back to 2.3.2.1",
        ),
        (
            "Resume",
            "update: Resume",
            "taking 300 pipelines out of maintenance mode",
        ),
        (
            "Modules",
            "update: Modules",
            "updating gluesync-gluesync-chronos to 0.3.3",
        ),
        ("Finish", "update: Finish", "modules done"),
    ] {
        out.push(fixture(
            label,
            &at_step(&started, step(name), message),
            "Progressing",
            &format!("Update{name}: {message} {arrow} {name})"),
        ));
    }
    let mut g = platform("2.3.2.1", 2);
    g.spec.modules.insert(CHRONOS.into(), "0.3.3".into());
    g.status = current.status.clone();
    let modules_only = decided(&g, &kit("2.3.2.1"));
    out.push(fixture(
        "update of modules only: Modules",
        &at_step(
            &modules_only,
            step("Modules"),
            "updating gluesync-gluesync-chronos to 0.3.3",
        ),
        "Progressing",
        "UpdateModules: updating gluesync-gluesync-chronos to 0.3.3 (step Modules)",
    ));

    // How updates end.
    let g = with_attempt(
        platform("2.3.2.2", 2),
        UpdateResult::Succeeded,
        "update finished",
        2,
    );
    out.push(fixture(
        "update Succeeded",
        &idle(g, &kit("2.3.2.2")),
        "Healthy",
        "Running 2.3.2.2 (update policy ui)",
    ));
    let why = "Core Hub failed its stability check: gluesync-gluesync-core-hub: pod \
               gluesync-gluesync-core-hub-0 is CrashLoopBackOff: back-off 10s restarting failed container";
    let g = with_attempt(platform("2.3.2.2", 2), UpdateResult::Failed, why, 2);
    out.push(fixture(
        "update Failed, Core Hub rolled back",
        &idle(g, &kit("2.3.2.1")),
        "Degraded",
        &format!("UpdateFailed: the last update failed: {why}"),
    ));
    let why = "gluesync-gluesync-chronos rolled back: pod gluesync-gluesync-chronos-0 is \
               ImagePullBackOff: Back-off pulling image";
    let g = with_attempt(platform("2.3.2.2", 2), UpdateResult::Degraded, why, 2);
    out.push(fixture(
        "update Degraded, a module rolled back",
        &idle(g, &kit("2.3.2.2")),
        "Degraded",
        &format!("UpdateDegraded: the last update ended degraded: {why}"),
    ));
    let why = "12 of 300 pipelines did not reach maintenance mode within 300 s";
    let g = with_attempt(platform("2.3.2.2", 2), UpdateResult::Refused, why, 2);
    out.push(fixture(
        "update Refused (drain timeout)",
        &idle(g, &kit("2.3.2.1")),
        "Degraded",
        &format!("UpdateRefused: the last update was refused: {why}"),
    ));
    let mut g = platform("2.3.2.1", 2);
    g.spec.modules.insert(CHRONOS.into(), "0.3.3".into());
    let why = "StatefulSet gluesync-gluesync-chronos has updateStrategy OnDelete";
    let g = with_attempt(g, UpdateResult::Refused, why, 2);
    out.push(fixture(
        "update of modules only Refused, Core Hub current",
        &idle(g, &kit("2.3.2.1")),
        "Healthy",
        running,
    ));

    // What GKO never writes, but a check must survive.
    out.push(fixture(
        "Ready Unknown",
        &current_with(vec![
            cond(
                READY,
                "Unknown",
                "Pending",
                "GKO has not read the install yet",
                1,
            ),
            cond(RECONCILING, "Unknown", "Pending", "", 1),
            cond(STALLED, "Unknown", "Pending", "", 1),
        ]),
        "Progressing",
        "GKO has not read the install yet",
    ));
    out.push(fixture(
        "Ready=False with neither Reconciling nor Stalled (contract breach)",
        &current_with(vec![
            cond(
                READY,
                "False",
                "WorkloadNotReady",
                "not ready: gluesync-gluesync-chronos",
                1,
            ),
            cond(RECONCILING, "False", "WorkloadNotReady", "", 1),
            cond(STALLED, "False", "WorkloadNotReady", "", 1),
        ]),
        "Degraded",
        "WorkloadNotReady: not ready: gluesync-gluesync-chronos",
    ));
    out.push(fixture(
        "no Ready condition",
        &current_with(vec![
            cond(RECONCILING, "False", "Available", "", 1),
            cond(STALLED, "False", "Available", "", 1),
        ]),
        "Progressing",
        "Ready condition not reported yet",
    ));
    let mut g = current_with(vec![
        cond(READY, "True", "Available", "Core Hub 2.3.2.1 runs", 1),
        cond(RECONCILING, "False", "Available", "", 2),
        cond(STALLED, "False", "Available", "", 2),
    ]);
    g.metadata.generation = Some(2);
    g.status.as_mut().expect("a status").observed_generation = Some(2);
    out.push(fixture(
        "Ready observed an older generation than the status",
        &g,
        "Progressing",
        "Spec generation 2 not yet observed (observed 1)",
    ));
    let mut g = current_with(vec![
        cond(READY, "True", "Available", "Core Hub 2.3.2.1 runs", 1),
        cond(RECONCILING, "False", "Available", "", 1),
        cond(STALLED, "False", "Available", "", 1),
    ]);
    for c in &mut g.status.as_mut().expect("a status").conditions {
        c.observed_generation = None;
    }
    g.metadata.generation = Some(2);
    out.push(fixture(
        "conditions without observedGeneration, status from an older generation",
        &g,
        "Progressing",
        "Spec generation 2 not yet observed (observed 1)",
    ));
    // The two waits for a person or a time, as GKO's engine decides them: Suspended.
    let mut g = platform("2.3.2.2", 2);
    g.status = idle(platform("2.3.2.1", 1), &kit("2.3.2.1")).status;
    g.spec.approval = gluesync_operator::api::Approval::Manual;
    g.spec.catalog.offline = true;
    g.metadata.finalizers = Some(vec![gluesync_operator::api::FINALIZER.into()]);
    for _ in 0..4 {
        g = decided(&g, &kit("2.3.2.1"));
    }
    assert_eq!(
        g.status
            .as_ref()
            .and_then(|s| s.update.as_ref())
            .map(|u| u.step.name()),
        Some(gluesync_operator::api::UpdateStep::Waiting)
    );
    let id = g
        .status
        .as_ref()
        .and_then(|s| s.update.as_ref())
        .and_then(|u| u.approval_id.clone())
        .expect("an approvalID");
    assert!(id.starts_with("generation-2-"), "{id}");
    out.push(fixture(
        "waiting for approval",
        &g,
        "Suspended",
        &format!(
            "WaitingForApproval: waiting for approval of the update to 2.3.2.2 (nothing is paused or \
             changed): `kubectl gluesync approve`, or the annotation \
             gluesync.molo17.com/approve={id}; refused after 1440 minutes"
        ),
    ));
    let mut g = platform("2.3.2.2", 2);
    g.status = idle(platform("2.3.2.1", 1), &kit("2.3.2.1")).status;
    g.spec.maintenance_windows = serde_json::from_value(json!([
        {"days": ["Sat"], "start": "22:00", "durationMinutes": 120, "timeZone": "Europe/Rome"}
    ]))
    .expect("a window");
    out.push(fixture(
        "waiting for a maintenance window",
        &decided(&g, &kit("2.3.2.1")),
        "Suspended",
        "WaitingForMaintenanceWindow: the update to Core Hub 2.3.2.2 waits for the maintenance window \
         at 2026-09-05 20:00 UTC (Sat 22:00 Europe/Rome)",
    ));
    out.push(fixture(
        "Stalled and Reconciling both True (contract breach)",
        &current_with(vec![
            cond(READY, "False", "UpdateInProgress", "", 1),
            cond(
                RECONCILING,
                "True",
                "UpdateCoreHub",
                "waiting for Core Hub",
                1,
            ),
            cond(STALLED, "True", "UpdateFailed", "the last update failed", 1),
        ]),
        "Degraded",
        "UpdateFailed: the last update failed",
    ));
    out
}

// ---------------------------------------------------------------------------------------------------

#[test]
fn every_status_gko_writes_gets_the_documented_health() {
    let mut wrong = vec![];
    let mut table = String::from("| fixture | health | message |\n|---|---|---|\n");
    for f in fixtures() {
        let (status, message) = argocd_health(&f.object);
        table.push_str(&format!("| {} | {status} | {message} |\n", f.name));
        if (status.as_str(), message.as_str()) != (f.status, f.message.as_str()) {
            wrong.push(format!(
                "{}:\n  got      {status}: {message}\n  expected {}: {}",
                f.name, f.status, f.message
            ));
        }
        let healthy = status == "Healthy";
        if healthy != kubectl_wait_ready(&f.object) {
            wrong.push(format!(
                "{}: Argo CD says {status}, kubectl wait --for=condition=Ready says {}",
                f.name,
                if healthy { "not met" } else { "met" }
            ));
        }
    }
    println!("{table}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn gko_keeps_its_condition_contract_in_every_fixture_it_computes() {
    // Whenever Ready=False, exactly one of Reconciling and Stalled is True; Ready=True has both False.
    for f in fixtures()
        .into_iter()
        .filter(|f| !["Ready Unknown", "no Ready condition"].contains(&f.name))
        .filter(|f| {
            !f.name.contains("contract breach")
                && !f.name.contains("older generation")
                && !f.name.contains("without observedGeneration")
        })
    {
        let Some(conditions) = f
            .object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
        else {
            continue;
        };
        let of = |t: &str| {
            conditions
                .iter()
                .find(|c| c["type"] == t)
                .and_then(|c| c["status"].as_str())
                .unwrap_or("absent")
                .to_string()
        };
        let (ready, reconciling, stalled) = (of(READY), of(RECONCILING), of(STALLED));
        let trues = [&reconciling, &stalled]
            .iter()
            .filter(|s| s.as_str() == "True")
            .count();
        match ready.as_str() {
            "False" => assert_eq!(
                trues, 1,
                "{}: Ready=False with {trues} of Reconciling/Stalled True",
                f.name
            ),
            "True" => assert_eq!(
                trues, 0,
                "{}: Ready=True with Reconciling or Stalled True",
                f.name
            ),
            other => panic!("{}: GKO wrote Ready={other}", f.name),
        }
    }
}

#[test]
fn the_update_fixtures_carry_the_conditions_gko_writes_in_flight() {
    // `at_step` rebuilds the conditions of an update in flight; for the step GKO's own code wrote
    // (Preflight), the rebuild is what GKO wrote.
    let started = started_update();
    let status = started.status.as_ref().expect("a status");
    let update = status.update.as_ref().expect("an update started");
    assert_eq!(update.from.as_deref(), Some("2.3.2.1"));
    assert_eq!(update.target.as_deref(), Some("2.3.2.2"));
    let message = status.message.clone().unwrap_or_default();
    let rebuilt = in_flight(&status.conditions, &update.step, &message, 2);
    assert_eq!(rebuilt, status.conditions);
}

#[test]
fn the_check_never_raises_an_error_on_an_unexpected_shape() {
    let odd = [
        json!({}),
        json!({"status": "Current"}),
        json!({"metadata": {"generation": "2"}, "status": {"conditions": "Ready"}}),
        json!({"metadata": {}, "status": {"conditions": [1, "Ready", null, {}]}}),
        json!({"metadata": {"generation": 3}, "status": {"observedGeneration": "3", "conditions": [{"type": "Ready"}]}}),
        json!({"status": {"conditions": [{"type": "Ready", "status": "True"}], "version": 2.3, "update": "x"}}),
        json!({"status": {"conditions": [{"type": "Reconciling", "status": "True", "reason": 7}], "update": {"step": ["CoreHub"], "from": {}}}}),
        json!({"status": {"conditions": [{"type": "Stalled", "status": "True"}]}}),
        json!({"spec": [], "status": {"phase": "UpdateAvailable", "conditions": {"type": "Ready"}}}),
    ];
    for obj in odd {
        let (status, message) = argocd_health(&obj);
        assert!(!message.is_empty(), "{obj}: {status} with an empty message");
    }
}

#[test]
fn the_check_uses_nothing_beyond_the_base_library() {
    let lua = base_lua();
    for lib in ["string", "table", "math", "os", "io", "debug", "package"] {
        assert!(
            lua.globals()
                .get::<mlua::Value>(lib)
                .expect("a global")
                .is_nil(),
            "the test's Lua must not open {lib}"
        );
    }
    // A check that uses one of them fails here, as it would in Argo CD without useOpenLibs.
    let err = lua
        .load("return string.upper('x')")
        .eval::<mlua::Value>()
        .expect_err("string is not open");
    assert!(err.to_string().contains("string"), "{err}");
}

#[test]
fn the_argocd_cm_snippet_carries_the_same_script() {
    let cm: Value = serde_yaml::from_str(ARGOCD_CM).expect("argocd-cm.yaml parses");
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["metadata"]["name"], "argocd-cm");
    let data = cm["data"].as_object().expect("argocd-cm.yaml has data");
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        [HEALTH_KEY],
        "one entry, under Argo CD's key for GluesyncPlatform"
    );
    assert!(
        data[HEALTH_KEY].as_str() == Some(HEALTH_LUA),
        "deploy/argocd/argocd-cm.yaml and deploy/argocd/health.lua differ: copy health.lua into the \
         ConfigMap, indented by four spaces"
    );
}

#[test]
fn the_argocd_docs_yaml_parses_and_every_ignore_rule_names_its_group() {
    let mut blocks = 0;
    let mut rules = 0;
    let mut statefulset_rules = 0;
    for block in ARGOCD_DOC.split("```yaml\n").skip(1) {
        let yaml = block.split("```").next().unwrap_or_default();
        let doc: Value = serde_yaml::from_str(yaml).unwrap_or_else(|e| {
            panic!("a YAML block of docs/argocd.md does not parse: {e}\n{yaml}")
        });
        blocks += 1;
        let ignores = doc
            .pointer("/spec/ignoreDifferences")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for rule in ignores {
            rules += 1;
            // Without `group`, RespectIgnoreDifferences does not keep the field (argo-cd#28590).
            assert!(
                rule["group"].is_string() && rule["kind"].is_string(),
                "an ignoreDifferences rule without group or kind: {rule}"
            );
            if rule["kind"] == "Deployment" {
                // Labels cannot scope an ignore rule: Deployments are named.
                assert!(
                    rule["name"].is_string(),
                    "a Deployment rule without a name: {rule}"
                );
            }
            if rule["kind"] == "StatefulSet" {
                // As the product docs: every StatefulSet's image (agents, pinned third-party ones too).
                statefulset_rules += 1;
                assert!(
                    rule.get("name").is_none(),
                    "a StatefulSet rule names one StatefulSet, the others' images would be put back: {rule}"
                );
                assert!(
                    rule["jqPathExpressions"].as_array().is_some_and(|e| e
                        .iter()
                        .any(|e| e == ".spec.template.spec.containers[].image")),
                    "{rule}"
                );
            }
        }
    }
    assert!(
        statefulset_rules >= 2,
        "both policies' Applications ignore the StatefulSets' images"
    );
    assert!(
        blocks >= 3 && rules >= 4,
        "docs/argocd.md lost its Application examples"
    );
}

/// The rule for GKO's own Deployment ignores exactly what GKO writes there in its own update: the
/// container's image and the self-update annotation (see `Writer::self_update`).
#[test]
fn the_argocd_rule_for_gkos_deployment_covers_what_gko_writes() {
    let mut found = 0;
    for block in ARGOCD_DOC.split("```yaml\n").skip(1) {
        let yaml = block.split("```").next().unwrap_or_default();
        let doc: Value = serde_yaml::from_str(yaml).unwrap_or(Value::Null);
        for rule in doc
            .pointer("/spec/ignoreDifferences")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
        {
            let name = rule["name"].as_str().unwrap_or_default();
            if rule["kind"] != "Deployment" || !name.ends_with("gluesync-operator") {
                continue;
            }
            found += 1;
            let paths: Vec<&str> = rule["jqPathExpressions"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            assert!(
                paths.contains(&".spec.template.spec.containers[].image"),
                "{rule}"
            );
            let annotation = format!(
                ".metadata.annotations[\"{}\"]",
                gluesync_operator::api::SELF_UPDATE_ANNOTATION
            );
            assert!(paths.contains(&annotation.as_str()), "{rule}");
        }
    }
    assert!(
        found >= 1,
        "docs/argocd.md has a rule for GKO's own Deployment"
    );
}
