//! What the status says when no update runs: a pure function of the GluesyncPlatform, the workloads of its
//! namespace and the previous status. It keeps every timestamp that has no reason to move, so the same
//! cluster always gives the same status and a quiet cluster causes no write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::{
    api::version::{ImageRef, Version},
    api::{
        ComponentStatus, ComponentType, GluesyncPlatform, GluesyncPlatformStatus, Phase, Problem,
        UpdateResult,
    },
    update::observed::Workload,
};

pub const READY: &str = "Ready";
pub const RECONCILING: &str = "Reconciling";
pub const STALLED: &str = "Stalled";

/// The components in the order users read them: Core Hub, agents, modules, third-party, GKO; then by name.
pub fn components(gsp: &GluesyncPlatform, workloads: &[Workload]) -> Vec<ComponentStatus> {
    let previous = gsp
        .status
        .as_ref()
        .map(|s| s.components.as_slice())
        .unwrap_or_default();
    let mut out: Vec<ComponentStatus> = workloads
        .iter()
        .filter(|w| w.container.is_some())
        .filter_map(|w| {
            let available = previous
                .iter()
                .find(|c| c.name == w.name)
                .and_then(|c| c.available.clone());
            w.component_status(available)
        })
        .collect();
    out.sort_by(|a, b| (a.component_type, &a.name).cmp(&(b.component_type, &b.name)));
    out
}

/// What keeps GKO from managing this install, if anything.
pub fn problem(gsp: &GluesyncPlatform, workloads: &[Workload]) -> Option<Problem> {
    let ns = gsp.metadata.namespace.as_deref().unwrap_or_default();
    let core_hubs: Vec<&Workload> = workloads
        .iter()
        .filter(|w| w.component_type == Some(ComponentType::CoreHub))
        .collect();
    match core_hubs.as_slice() {
        [] => {
            return Some(Problem {
                reason: "CoreHubNotFound",
                message: format!(
                    "no StatefulSet or Deployment in namespace {ns} carries the label \
                     com.molo17.conductor.type=core-hub"
                ),
            });
        }
        [_] => {}
        many => {
            let names: Vec<&str> = many.iter().map(|w| w.name.as_str()).collect();
            return Some(Problem {
                reason: "MultipleCoreHubs",
                message: format!(
                    "{} workloads carry the label com.molo17.conductor.type=core-hub ({}); exactly \
                     one must",
                    many.len(),
                    names.join(", ")
                ),
            });
        }
    }
    if let Some(why) = super::windows::problem(&gsp.spec.maintenance_windows) {
        return Some(Problem {
            reason: "InvalidMaintenanceWindow",
            message: why,
        });
    }
    if let Some(w) = workloads.iter().find(|w| w.container.is_none()) {
        return Some(Problem {
            reason: "ContainerNotFound",
            message: format!(
                "{} {} has no container named by its annotation gluesync.molo17.com/container",
                w.kind_name(),
                w.name
            ),
        });
    }
    if let Some(w) = workloads.iter().find(|w| w.component_type.is_none()) {
        return Some(Problem {
            reason: "UnknownComponentType",
            message: format!(
                "{} {} has com.molo17.conductor.type={:?}; known values are core-hub, agent, \
                 module, third-party and operator",
                w.kind_name(),
                w.name,
                w.label_value
            ),
        });
    }
    None
}

/// True when the image runs the version `desired` asks for. A desired version without a suffix matches
/// whatever suffix the image has (`2.3.2.2` is current on `2.3.2.2-ubi`); one with a suffix needs it.
pub fn runs_version(image: &str, desired: &str) -> bool {
    let image = ImageRef::parse(image);
    let Some(tag) = image.tag.as_deref() else {
        return false;
    };
    if desired.contains('-') {
        return tag == desired;
    }
    match (
        image.version_text().map(str::parse::<Version>),
        desired.parse::<Version>(),
    ) {
        (Some(Ok(running)), Ok(desired)) => running == desired,
        _ => false,
    }
}

/// The status of an install no update is working on.
pub fn idle(gsp: &GluesyncPlatform, workloads: &[Workload], now: &Time) -> GluesyncPlatformStatus {
    let previous = gsp.status.clone().unwrap_or_default();
    let generation = gsp.metadata.generation.unwrap_or(0);
    let components = components(gsp, workloads);
    let core_hub = components
        .iter()
        .find(|c| c.component_type == ComponentType::CoreHub);

    let mut status = GluesyncPlatformStatus {
        components: components.clone(),
        observed_generation: Some(generation),
        ..previous.clone()
    };
    if gsp.spec.catalog.offline {
        // An offline install has no catalog: nothing is available, nothing was checked.
        status.available = None;
        status.catalog = None;
        for c in &mut status.components {
            c.available = None;
        }
    }
    // Current, or UpdateAvailable when the catalog knows a newer Core Hub.
    let newer_known = match (
        status.available.as_deref().map(str::parse::<Version>),
        core_hub
            .and_then(|c| c.version.as_deref())
            .map(str::parse::<Version>),
    ) {
        (Some(Ok(available)), Some(Ok(running))) => available > running,
        _ => false,
    };
    let settled = if newer_known {
        Phase::UpdateAvailable
    } else {
        Phase::Current
    };
    let generation_attempt = previous
        .last_attempt
        .as_ref()
        .filter(|a| a.generation == Some(generation));
    let mut conditions;
    if let Some(problem) = problem(gsp, workloads) {
        status.version = None;
        status.phase = None;
        status.message = Some(problem.message.clone());
        conditions = [
            (READY, false, problem.reason, problem.message.clone()),
            (RECONCILING, false, problem.reason, problem.message.clone()),
            (STALLED, true, problem.reason, problem.message),
        ];
    } else {
        // `problem` is None only when there is exactly one Core Hub.
        let core_hub = core_hub.cloned();
        let running = core_hub.as_ref().and_then(|c| c.version.clone());
        status.version = running.clone();
        let current = core_hub
            .as_ref()
            .is_some_and(|c| runs_version(&c.image, &gsp.spec.version));
        let not_ready: Vec<&str> = components
            .iter()
            .filter(|c| !c.ready)
            .map(|c| c.name.as_str())
            .collect();
        let sticky = generation_attempt
            .filter(|a| a.result != UpdateResult::Succeeded)
            .map(|a| (a.result, a.message.clone()));
        if let Some((result, why)) = sticky {
            // Degraded and Failed stay until the spec changes; a Refused update leaves the phase as it was.
            let (phase, reason) = match result {
                UpdateResult::Failed => (Some(Phase::Failed), "UpdateFailed"),
                UpdateResult::Degraded => (Some(Phase::Degraded), "UpdateDegraded"),
                _ => (previous.phase, "UpdateRefused"),
            };
            let message = match result {
                UpdateResult::Failed => format!("the last update failed: {why}"),
                UpdateResult::Degraded => format!("the last update ended degraded: {why}"),
                _ => format!("the last update was refused: {why}"),
            };
            status.phase = phase;
            status.message = Some(message.clone());
            let ready = result == UpdateResult::Refused && current && not_ready.is_empty();
            conditions = [
                (READY, ready, reason, message.clone()),
                (RECONCILING, false, reason, message.clone()),
                (STALLED, !ready, reason, message),
            ];
        } else if !current {
            // Either this spec's update has not run yet, and it starts next (or once what it waits for
            // ends); or it ran and something else changed the image since: GKO does not start
            // maintenance by itself for that, a new spec.requestID asks it to.
            let pending = generation_attempt.is_none();
            let (reason, next) = if pending {
                ("UpdatePending", "the update starts")
            } else {
                ("VersionDrift", "set a new spec.requestID to update")
            };
            let message = format!(
                "spec.version asks for Core Hub {} and {} runs; {next}",
                gsp.spec.version,
                running.as_deref().unwrap_or("an image without a version")
            );
            if status.phase == Some(Phase::Updating) {
                status.phase = Some(settled);
            }
            status.message = Some(message.clone());
            conditions = [
                (READY, false, reason, message.clone()),
                (RECONCILING, pending, reason, message.clone()),
                (STALLED, !pending, reason, message),
            ];
        } else if !not_ready.is_empty() {
            let message = format!("not ready: {}", not_ready.join(", "));
            status.phase = Some(settled);
            status.message = Some(message.clone());
            conditions = [
                (READY, false, "WorkloadNotReady", message.clone()),
                (RECONCILING, true, "WorkloadNotReady", message.clone()),
                (STALLED, false, "WorkloadNotReady", message),
            ];
        } else {
            let message = format!(
                "Core Hub {} runs; {} components ready",
                running.as_deref().unwrap_or_default(),
                components.len()
            );
            status.phase = Some(settled);
            status.message = Some(message.clone());
            conditions = [
                (READY, true, "Available", message.clone()),
                (RECONCILING, false, "Available", message.clone()),
                (STALLED, false, "Available", message),
            ];
        }
    }
    if super::mutants::ready_alone(&status) {
        for c in &mut conditions {
            c.1 = false;
        }
    }
    status.conditions = conditions
        .into_iter()
        .map(|(type_, value, reason, message)| {
            condition(
                &previous.conditions,
                type_,
                value,
                reason,
                &message,
                generation,
                now,
            )
        })
        .collect();
    status
}

/// A condition that keeps its `lastTransitionTime` while its status stays the same.
pub fn condition(
    previous: &[Condition],
    type_: &str,
    value: bool,
    reason: &str,
    message: &str,
    generation: i64,
    now: &Time,
) -> Condition {
    let status = if value { "True" } else { "False" };
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: Some(generation),
        last_transition_time,
    }
}

/// The Stalled problem a status reports, if any: `(reason, message)`.
pub fn stalled(status: Option<&GluesyncPlatformStatus>) -> Option<(&str, &str)> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == STALLED && c.status == "True")
        .map(|c| (c.reason.as_str(), c.message.as_str()))
}

#[cfg(test)]
mod tests {
    use kube::core::ObjectMeta;

    use super::*;
    use crate::api::{GluesyncPlatformSpec, WorkloadKind};

    fn gsp(version: &str) -> GluesyncPlatform {
        let mut g = GluesyncPlatform::new(
            "gluesync",
            serde_json::from_value::<GluesyncPlatformSpec>(serde_json::json!({"version": version}))
                .unwrap(),
        );
        g.metadata = ObjectMeta {
            name: Some("gluesync".into()),
            namespace: Some("ns".into()),
            generation: Some(3),
            ..Default::default()
        };
        g
    }

    fn workload(name: &str, label: &str, image: &str, ready: bool) -> Workload {
        Workload {
            kind: WorkloadKind::StatefulSet,
            ready,
            pods: vec![],
            ..crate::update::fixtures::workload(name, label, image)
        }
    }

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn sample() -> Vec<Workload> {
        vec![
            workload("grafana", "third-party", "grafana/grafana:11.2.0", true),
            workload("chronos", "module", "molo17/gluesync-chronos:0.3.2", true),
            workload(
                "core-hub",
                "core-hub",
                "molo17/gluesync-core-hub:2.3.2.1",
                true,
            ),
        ]
    }

    fn cond<'a>(s: &'a GluesyncPlatformStatus, t: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn a_current_install_is_current_and_ready() {
        let s = idle(&gsp("2.3.2.1"), &sample(), &t("2026-01-01T00:00:00Z"));
        assert_eq!(s.phase, Some(Phase::Current));
        assert_eq!(s.version.as_deref(), Some("2.3.2.1"));
        assert_eq!(s.observed_generation, Some(3));
        let names: Vec<_> = s.components.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["core-hub", "chronos", "grafana"]);
        assert_eq!(cond(&s, READY).status, "True");
        assert_eq!(cond(&s, RECONCILING).status, "False");
        assert_eq!(cond(&s, STALLED).status, "False");
    }

    #[test]
    fn the_same_cluster_gives_the_same_status() {
        let mut g = gsp("2.3.2.1");
        let first = idle(&g, &sample(), &t("2026-01-01T00:00:00Z"));
        g.status = Some(first.clone());
        let again = idle(&g, &sample(), &t("2026-01-01T01:00:00Z"));
        assert_eq!(first, again, "no change, yet the status moved");
    }

    #[test]
    fn a_transition_moves_only_the_conditions_that_change() {
        let mut g = gsp("2.3.2.1");
        g.status = Some(idle(&g, &sample(), &t("2026-01-01T00:00:00Z")));
        let mut w = sample();
        w[2].ready = false;
        let s = idle(&g, &w, &t("2026-01-01T01:00:00Z"));
        assert_eq!(cond(&s, READY).status, "False");
        assert_eq!(
            cond(&s, READY).last_transition_time,
            t("2026-01-01T01:00:00Z")
        );
        assert_eq!(
            cond(&s, STALLED).last_transition_time,
            t("2026-01-01T00:00:00Z")
        );
        assert_eq!(s.message.as_deref(), Some("not ready: core-hub"));
    }

    #[test]
    fn no_core_hub_or_two_is_stalled_not_a_crash() {
        let w = sample()[..2].to_vec();
        let s = idle(&gsp("2.3.2.1"), &w, &t("2026-01-01T00:00:00Z"));
        assert_eq!(cond(&s, STALLED).reason, "CoreHubNotFound");
        assert_eq!(cond(&s, READY).status, "False");
        assert_eq!(s.version, None);
        assert_eq!(s.phase, None);

        let mut w = sample();
        w.push(workload(
            "core-hub-2",
            "core-hub",
            "molo17/gluesync-core-hub:2.3.2.1",
            true,
        ));
        let s = idle(&gsp("2.3.2.1"), &w, &t("2026-01-01T00:00:00Z"));
        assert_eq!(cond(&s, STALLED).reason, "MultipleCoreHubs");
        assert!(cond(&s, STALLED).message.contains("core-hub, core-hub-2"));
    }

    #[test]
    fn an_unknown_label_value_is_reported() {
        let mut w = sample();
        w.push(workload("x", "database", "x:1", true));
        let s = idle(&gsp("2.3.2.1"), &w, &t("2026-01-01T00:00:00Z"));
        assert_eq!(cond(&s, STALLED).reason, "UnknownComponentType");
        assert_eq!(
            s.components.len(),
            3,
            "the unknown workload is no component"
        );
    }

    #[test]
    fn desired_versions_match_by_number_and_suffix() {
        assert!(runs_version("molo17/a:2.3.2.2-ubi", "2.3.2.2"));
        assert!(runs_version("molo17/a:2.3.2.2", "2.3.2.2.0"));
        assert!(!runs_version("molo17/a:2.3.2.1", "2.3.2.2"));
        assert!(runs_version("molo17/a:2.3.2.2-crash", "2.3.2.2-crash"));
        assert!(!runs_version("molo17/a:2.3.2.2", "2.3.2.2-crash"));
        assert!(!runs_version("molo17/a:latest", "2.3.2.2"));
        assert!(!runs_version("molo17/a", "2.3.2.2"));
    }

    #[test]
    fn a_drifted_version_is_stalled_until_the_spec_changes() {
        // This spec's update ran (and succeeded); then Core Hub's image was changed by hand.
        let g = after(UpdateResult::Succeeded, "2.3.2.2");
        let s = idle(&g, &sample(), &t("2026-01-01T00:00:00Z"));
        assert_eq!(cond(&s, STALLED).status, "True");
        assert_eq!(cond(&s, STALLED).reason, "VersionDrift");
        assert_eq!(cond(&s, RECONCILING).status, "False");
        assert_eq!(s.version.as_deref(), Some("2.3.2.1"));
    }

    /// A status whose last attempt, of this generation, ended with `result`.
    fn after(result: UpdateResult, version: &str) -> GluesyncPlatform {
        let mut g = gsp(version);
        g.status = Some(GluesyncPlatformStatus {
            phase: Some(Phase::Current),
            last_attempt: Some(crate::api::Attempt {
                target: Some(version.into()),
                request_id: None,
                requested_by: None,
                generation: g.metadata.generation,
                result,
                message: "why".into(),
                started_at: None,
                finished_at: t("2026-01-01T00:00:00Z"),
                results: vec![],
                paused_pipelines: Default::default(),
                resumed_pipelines: Default::default(),
            }),
            ..Default::default()
        });
        g
    }

    /// The statuses of Ready and Stalled.
    fn ready_stalled(s: &GluesyncPlatformStatus) -> (&str, &str) {
        (
            cond(s, READY).status.as_str(),
            cond(s, STALLED).status.as_str(),
        )
    }

    /// A failed or degraded update's phase and Stalled stay until the spec changes, even with every
    /// workload ready; a refused one keeps the phase it found, and is Ready when the install is.
    #[test]
    fn the_last_updates_result_stays_until_the_spec_changes() {
        let now = t("2026-01-01T00:00:00Z");
        // Rolled back: 2.3.2.1 runs, every workload ready.
        let s = idle(&after(UpdateResult::Failed, "2.3.2.2"), &sample(), &now);
        assert_eq!(s.phase, Some(Phase::Failed));
        assert_eq!(s.message.as_deref(), Some("the last update failed: why"));
        assert_eq!(ready_stalled(&s), ("False", "True"));
        assert_eq!(cond(&s, STALLED).reason, "UpdateFailed");
        assert_eq!(
            stalled(Some(&s)),
            Some(("UpdateFailed", "the last update failed: why"))
        );
        // Degraded: Core Hub updated, a module left; everything runs and is ready.
        let s = idle(&after(UpdateResult::Degraded, "2.3.2.1"), &sample(), &now);
        assert_eq!(s.phase, Some(Phase::Degraded));
        assert_eq!(
            s.message.as_deref(),
            Some("the last update ended degraded: why")
        );
        assert_eq!(ready_stalled(&s), ("False", "True"));
        assert_eq!(cond(&s, STALLED).reason, "UpdateDegraded");
        // Refused on a current, ready install: Ready, the phase as it was.
        let s = idle(&after(UpdateResult::Refused, "2.3.2.1"), &sample(), &now);
        assert_eq!(s.phase, Some(Phase::Current));
        assert_eq!(
            s.message.as_deref(),
            Some("the last update was refused: why")
        );
        assert_eq!(ready_stalled(&s), ("True", "False"));
        assert_eq!(cond(&s, READY).reason, "UpdateRefused");
        assert_eq!(stalled(Some(&s)), None);
        // Refused, and the spec's version does not run: stalled until the spec changes.
        let s = idle(&after(UpdateResult::Refused, "2.3.2.2"), &sample(), &now);
        assert_eq!(ready_stalled(&s), ("False", "True"));
        // Refused on a current install with a workload not ready: not Ready.
        let mut w = sample();
        w[1].ready = false;
        let s = idle(&after(UpdateResult::Refused, "2.3.2.1"), &w, &now);
        assert_eq!(ready_stalled(&s), ("False", "True"));
    }

    #[test]
    fn a_spec_whose_update_has_not_run_is_reconciling_not_stalled() {
        // Between two updates (the spec changed while one ran): the next starts, nothing is stuck, and the
        // phase of the update that ended does not stay.
        let mut g = gsp("2.3.2.2");
        g.status = Some(GluesyncPlatformStatus {
            phase: Some(Phase::Updating),
            ..Default::default()
        });
        let s = idle(&g, &sample(), &t("2026-01-01T00:00:00Z"));
        assert_eq!(cond(&s, STALLED).status, "False");
        assert_eq!(cond(&s, RECONCILING).status, "True");
        assert_eq!(cond(&s, RECONCILING).reason, "UpdatePending");
        assert_ne!(s.phase, Some(Phase::Updating));
    }
}
