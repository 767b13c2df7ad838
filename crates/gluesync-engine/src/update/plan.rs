//! Starting an update, Preflight (is it valid, what changes) and Snapshot (the images before).

use std::collections::BTreeMap;

use super::{Decision, Observed, move_to, refuse};
use crate::{
    api::version::{ImageRef, Version},
    api::{
        ComponentState, ComponentType, GluesyncPlatform, PlannedComponent, UpdateStatus, UpdateStep,
    },
    update::catalog::Check,
    update::observed::Workload,
    update::status,
};

/// How long Preflight waits for the catalog's answer before it goes on without it.
pub const CATALOG_WAIT_SECONDS: i64 = 30;

/// The image a workload would have to be taken to for a desired version, or `None` when it runs it.
pub fn target_image(image: &str, desired: &str, registry: Option<&str>) -> Option<String> {
    if status::runs_version(image, desired) && registry.is_none_or(|r| image.starts_with(r)) {
        return None;
    }
    let parsed = ImageRef::parse(image);
    let repository = match registry {
        Some(r) => format!("{}/{}", r.trim_end_matches('/'), parsed.name()),
        None => parsed.repository.clone(),
    };
    let tag = if desired.contains('-') {
        desired.to_string()
    } else {
        format!("{desired}{}", parsed.tag_suffix())
    };
    Some(format!("{repository}:{tag}"))
}

/// Is there something the spec asks for that this generation has not yet tried?
pub(super) fn wants_update(gsp: &GluesyncPlatform, workloads: &[Workload]) -> bool {
    let status = gsp.status.clone().unwrap_or_default();
    let generation = gsp.metadata.generation.unwrap_or(0);
    if status::problem(gsp, workloads).is_some() {
        return false;
    }
    if let Some(last) = &status.last_attempt
        && last.generation == Some(generation)
    {
        return false;
    }
    let core_hub_behind = workloads.iter().any(|w| {
        matches!(
            w.component_type,
            Some(ComponentType::CoreHub | ComponentType::Agent)
        ) && !status::runs_version(&w.image, &gsp.spec.version)
    });
    let pin_behind = workloads.iter().any(|w| {
        gsp.spec
            .modules
            .get(&w.name)
            .is_some_and(|pin| !status::runs_version(&w.image, pin))
    });
    super::new_request(gsp) || core_hub_behind || pin_behind
}

/// The decision that starts an update, when the spec asks for one.
pub(super) fn start(gsp: &GluesyncPlatform, obs: &Observed) -> Option<Decision> {
    if !wants_update(gsp, obs.workloads) {
        return None;
    }
    let core_hub = obs
        .workloads
        .iter()
        .find(|w| w.component_type == Some(ComponentType::CoreHub));
    let mut status = status::idle(gsp, obs.workloads, &obs.now);
    let update = super::fresh(gsp, obs, super::new_request(gsp));
    let from = core_hub.and_then(|w| w.version()).unwrap_or_default();
    let who = match &update.requested_by {
        Some(crate::api::RequestedBy {
            username: Some(user),
            role,
            ..
        }) => format!(
            "asked by {user}{} from the Core Hub UI",
            role.as_ref().map(|r| format!(" ({r})")).unwrap_or_default()
        ),
        _ => "asked by a change of the GluesyncPlatform".to_string(),
    };
    status.message = Some(format!(
        "update of Core Hub from {from} to {} started, {who}",
        gsp.spec.version
    ));
    let mut d = Decision::new(status);
    d.event(
        false,
        crate::api::Reason::UpdateStarted,
        d.status.message.clone().unwrap_or_default(),
    );
    d.again = true;
    super::mark_updating(gsp, obs, &mut d, update);
    Some(d)
}

/// The catalog check Preflight asks for: the update's channel, every managed image.
fn preflight_check(gsp: &GluesyncPlatform, obs: &Observed, u: &UpdateStatus) -> Check {
    let token = format!(
        "preflight/{}/{}/{}",
        u.generation,
        u.started_at.0.as_second(),
        u.channel.as_str()
    );
    crate::update::catalog::check(gsp, obs.workloads, token, u.channel)
}

/// Preflight: the request checked (the platform's problems, the version and every image readable), the
/// catalog's answer waited for until the step's deadline, then the plan of every component; a request
/// that cannot be carried out is refused here, before anything changes.
pub(super) fn preflight(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    u: &mut UpdateStatus,
    d: &mut Decision,
) {
    let now = &obs.now;
    let desired_version = match readable(gsp, obs) {
        Ok(v) => v,
        Err(why) => return refuse(gsp, u, d, now, why),
    };
    let Some(catalog) = catalog_answer(gsp, obs, u, d) else {
        return;
    };
    let desired = gsp.spec.version.as_str();
    let core_hub = obs
        .workloads
        .iter()
        .find(|w| w.component_type == Some(ComponentType::CoreHub));
    if let (Some(catalog), Some(ch)) = (catalog, core_hub)
        && let Some(latest) = catalog.get(ImageRef::parse(&ch.image).name())
        && let Ok(latest) = latest.parse::<Version>()
        && desired_version > latest
    {
        return refuse(
            gsp,
            u,
            d,
            now,
            format!(
                "Core Hub {desired} is not in the version catalog: the latest on the {} channel is {latest}",
                u.channel.as_str()
            ),
        );
    }
    let core_hub_changes = core_hub.is_some_and(|w| {
        target_image(&w.image, desired, gsp.spec.image_registry.as_deref()).is_some()
    });
    let planner = Planner {
        gsp,
        u,
        catalog,
        core_hub_changes,
        named: super::named_components(gsp, u),
    };
    let mut plan = Vec::new();
    for w in obs.workloads {
        let (Some(kind), Some(container)) = (w.component_type, w.container.clone()) else {
            continue;
        };
        let Some((to_image, skip_note)) = planner.target(w, kind, &container, d) else {
            continue;
        };
        if to_image.is_some()
            && kind != ComponentType::Operator
            && let Some(why) = &w.rollout_blocker
        {
            return refuse(gsp, u, d, now, why.clone());
        }
        let state = if to_image.is_some() {
            ComponentState::Pending
        } else {
            ComponentState::Skipped
        };
        plan.push(PlannedComponent {
            name: w.name.clone(),
            component_type: kind,
            kind: w.kind,
            container,
            from_image: w.image.clone(),
            to_image,
            state,
            message: skip_note,
            patched_at: None,
            stable: None,
        });
    }
    // Core Hub, agents, then modules and third-party images, by name.
    plan.sort_by(|a, b| (a.component_type, &a.name).cmp(&(b.component_type, &b.name)));
    if !core_hub_changes {
        u.target = None;
    }
    u.components = plan;
    d.status.message = Some(match catalog {
        None if !gsp.spec.catalog.offline => format!(
            "preflight passed without the version catalog (no answer within {CATALOG_WAIT_SECONDS} s); \
             recording the images of every component"
        ),
        _ => "preflight passed; recording the images of every component".into(),
    });
    move_to(gsp, u, UpdateStep::Snapshot, now, d);
}

/// The version asked for, when nothing stands in the way of reading the install: no problem of the
/// platform's or of GKO's access, a version that parses, and an image tag with a version on every
/// component but GKO. Else why not.
fn readable(gsp: &GluesyncPlatform, obs: &Observed) -> Result<Version, String> {
    if let Some(problem) = status::problem(gsp, obs.workloads).or(obs.access_problem.clone()) {
        return Err(problem.message);
    }
    let desired = gsp.spec.version.as_str();
    let version = desired
        .split('-')
        .next()
        .unwrap_or(desired)
        .parse::<Version>()
        .map_err(|e| e.to_string())?;
    for w in obs.workloads {
        if w.component_type == Some(ComponentType::Operator) {
            continue;
        }
        if crate::api::version::image_version(&w.image).is_err() {
            return Err(format!(
                "{} {} runs image {:?}, whose tag carries no version GKO can read",
                w.kind_name(),
                w.name,
                w.image
            ));
        }
    }
    Ok(version)
}

/// The catalog's answer for the update's channel: `Some(None)` without one (an offline install, a
/// failed check, or none by the step's deadline), `None` while it is still waited for (the decision
/// then asks for the check and says so).
fn catalog_answer<'a>(
    gsp: &GluesyncPlatform,
    obs: &Observed<'a>,
    u: &UpdateStatus,
    d: &mut Decision,
) -> Option<Option<&'a BTreeMap<String, String>>> {
    if gsp.spec.catalog.offline {
        return Some(None);
    }
    let check = preflight_check(gsp, obs, u);
    if let Some(answer) = obs.catalog.filter(|a| a.token == check.token) {
        return Some(answer.result.as_ref().ok());
    }
    let now = &obs.now;
    let deadline = u.step.deadline().cloned().unwrap_or_else(|| now.clone());
    if super::passed(&deadline, now) {
        return Some(None);
    }
    d.status.message = Some(format!(
        "asking the version catalog for the latest versions on the {} channel",
        u.channel.as_str()
    ));
    d.catalog = Some(check);
    d.requeue_at(&deadline, now);
    None
}

/// What Preflight plans each component with.
struct Planner<'a> {
    gsp: &'a GluesyncPlatform,
    u: &'a UpdateStatus,
    catalog: Option<&'a BTreeMap<String, String>>,
    /// Core Hub's image changes: the modules without a pin follow the catalog.
    core_hub_changes: bool,
    /// The components the Core Hub UI's request names, if it names some.
    named: Option<Vec<String>>,
}

impl Planner<'_> {
    /// The image a component goes to (`None`: it stays) and the note said of it; `None` for a component
    /// the plan does not list (GKO itself, unless it will update itself after this update).
    fn target(
        &self,
        w: &Workload,
        kind: ComponentType,
        container: &str,
        d: &mut Decision,
    ) -> Option<(Option<String>, Option<String>)> {
        let (gsp, registry) = (self.gsp, self.gsp.spec.image_registry.as_deref());
        let desired = gsp.spec.version.as_str();
        let named = |name: &String| self.named.as_ref().is_none_or(|ids| ids.contains(name));
        Some(match kind {
            // GKO itself: listed only when it will update itself after this update (see selfupdate).
            ComponentType::Operator => {
                let to =
                    super::selfupdate::target(gsp, w, self.catalog).filter(|_| named(&w.name))?;
                if super::mutated(super::Mutant::SelfUpdateFirst) {
                    d.actions.push(super::Action::SelfUpdate {
                        name: w.name.clone(),
                        container: container.to_string(),
                        image: Some(to.clone()),
                        phase: None,
                    });
                }
                let note = format!(
                    "GKO updates itself to {} once this update has ended",
                    crate::api::version::image_version(&to)
                        .map(|v| v.to_string())
                        .unwrap_or_else(|_| to.clone())
                );
                (Some(to), Some(note))
            }
            ComponentType::CoreHub | ComponentType::Agent => {
                (target_image(&w.image, desired, registry), None)
            }
            ComponentType::Module | ComponentType::ThirdParty => {
                match gsp.spec.modules.get(&w.name) {
                    Some(pin) => (target_image(&w.image, pin, registry), None),
                    None if kind == ComponentType::ThirdParty => (
                        None,
                        Some("third-party: updated only when pinned in spec.modules".to_string()),
                    ),
                    None if gsp.spec.catalog.offline => (
                        None,
                        Some("no pin, and an offline install has no catalog".to_string()),
                    ),
                    None => {
                        let image = ImageRef::parse(&w.image);
                        let latest = self.catalog.and_then(|c| c.get(image.name()));
                        match (latest, w.version()) {
                            (None, _) if self.catalog.is_none() => (
                                None,
                                Some("no pin, and the version catalog did not answer".to_string()),
                            ),
                            (None, _) => (
                                None,
                                Some("no pin, and the catalog gave no version".to_string()),
                            ),
                            (Some(latest), Some(running))
                                if (self.core_hub_changes
                                    || (self.u.new_request && named(&w.name)))
                                    && latest.parse::<Version>().ok()
                                        > running.parse::<Version>().ok() =>
                            {
                                (target_image(&w.image, latest, registry), None)
                            }
                            _ => (None, None),
                        }
                    }
                }
            }
        })
    }
}

pub(super) fn snapshot(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    u: &mut UpdateStatus,
    d: &mut Decision,
) {
    for c in &mut u.components {
        if let Some(w) = obs.workloads.iter().find(|w| w.name == c.name) {
            c.from_image = w.image.clone();
        }
        if super::mutated(super::Mutant::AgentBeforeDrain)
            && c.component_type == ComponentType::Agent
        {
            d.actions.extend(super::rollout::new_image_write(c));
        }
    }
    if super::rollout::core_hub_changes(u) {
        // GKO's finalizer goes on with the next write (see `decide_now`); the drain asks nothing
        // before it is on.
        d.status.message = Some("putting running pipelines into maintenance mode".into());
        super::prepull::after_snapshot(gsp, obs, u, UpdateStep::Drain, d);
    } else {
        d.status.message = Some("Core Hub stays; updating modules".into());
        super::gate::after_snapshot(gsp, u, UpdateStep::Modules, &obs.now, d);
    }
}
