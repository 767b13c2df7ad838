//! Disaster recovery: this install as one site of a pair, built the way an update is.
//!
//! `spec.disasterRecovery` is the setup wanted, `status.disasterRecovery` the setup reached. A setup
//! changes the pod templates of Core Hub and Chronos, one at a time, each through the stability check:
//! the environment that tells them their role and their peer, the two ports as container ports, and the
//! pair's Secret mounted read-only. Then a Service publishes the two ports. Every change is a strategic
//! merge patch computed from what the workload carries now, so sending it again does no harm; the
//! fields a setup changes are recorded in the status as they were before it (`components[].original`)
//! before the first change, and putting them back (a rollback, a teardown) restores exactly those.
//!
//! A workload that does not come up with the setup puts the whole setup back (RollingBack, then
//! Failed): nothing half-made stays. Failed stays until the spec asks for another setup. A teardown
//! puts the workloads back, then removes the Service and empties the pair's Secret. See
//! docs/disaster-recovery.md for the contract.

mod patch;

use super::{Action, Decision, Observed, plus};
use crate::{
    api::{
        ComponentType, DR_ANNOTATION, DR_SECRET_KEY, DR_SECRET_SUFFIX, DisasterRecoveryComponent,
        DisasterRecoveryComponentState as State, DisasterRecoveryPhase as Phase,
        DisasterRecoverySpec, DisasterRecoveryStatus, GluesyncPlatform, Made, WorkloadKind,
    },
    update::observed::Workload,
    update::status::{READY, RECONCILING, STALLED},
};
use patch::{clean, collision, env_now, patch, service, service_digest};

/// The volume (and its mount) that holds the pair's Secret in Core Hub's and Chronos's pods.
pub const VOLUME: &str = "gluesync-disaster-recovery";
/// Where the pair's Secret is mounted.
pub const MOUNT_PATH: &str = "/opt/gluesync/disaster-recovery";
/// The names of the two container ports (and Service ports).
pub const REPLICATION_PORT_NAME: &str = "dr-replication";
pub const CONTROL_PORT_NAME: &str = "dr-control";
/// The environment a setup gives Core Hub and Chronos.
pub const ENV: [&str; 6] = [
    "GLUESYNC_DR_ENABLED",
    "GLUESYNC_DR_ROLE",
    "GLUESYNC_DR_PEER_ADDRESS",
    "GLUESYNC_DR_REPLICATION_PORT",
    "GLUESYNC_DR_CONTROL_PORT",
    "GLUESYNC_DR_SECRET_FILE",
];
/// Labels of the Service and the Secret GKO makes.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "gluesync-operator");
pub use crate::api::PLATFORM_LABEL;

/// What GKO found of the pair's Secret and Service.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrObjects {
    pub secret: SecretState,
    /// The Service GKO makes exists.
    pub service: bool,
}

/// The pair's Secret, as GKO found it.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum SecretState {
    /// Not looked at (no setup wanted or in place).
    #[default]
    Unknown,
    /// GKO's installation does not allow it to read this Secret.
    NotAllowed,
    Missing,
    /// It exists without a non-empty `sharedSecret`: refused. `made_by_gko` when it still carries
    /// GKO's label (a Secret GKO wrote, its key taken out by hand), so a teardown still empties it.
    NoKey {
        made_by_gko: bool,
    },
    /// Usable; `made_by_gko` when GKO wrote it (a setup from the Core Hub UI), so a teardown removes it.
    Present {
        made_by_gko: bool,
    },
    /// Reading it failed.
    Unreadable(String),
}

/// The Secret a setup mounts.
pub fn secret_name(gsp: &GluesyncPlatform, spec: &DisasterRecoverySpec) -> String {
    spec.secret_name
        .clone()
        .unwrap_or_else(|| default_secret_name(gsp))
}

/// The Secret a setup from the Core Hub UI writes: `<platform>-disaster-recovery`.
pub fn default_secret_name(gsp: &GluesyncPlatform) -> String {
    format!(
        "{}{DR_SECRET_SUFFIX}",
        gsp.metadata.name.as_deref().unwrap_or("gluesync")
    )
}

/// The Service that publishes the pair's ports: `<platform>-disaster-recovery`.
pub fn service_name(gsp: &GluesyncPlatform) -> String {
    default_secret_name(gsp)
}

/// Which setup a workload carries: role, then a digest of everything that changes its pods.
pub fn setup_mark(gsp: &GluesyncPlatform, spec: &DisasterRecoverySpec) -> String {
    let parts = [
        spec.role.as_str().to_string(),
        spec.peer_address.clone(),
        spec.replication_port.to_string(),
        spec.control_port.to_string(),
        secret_name(gsp, spec),
        spec.revision.clone().unwrap_or_default(),
    ];
    format!(
        "{}-{}",
        spec.role.as_str(),
        &crate::api::ids::digest(&parts)[..12]
    )
}

/// The setup wanted now: the spec's, unless the platform is being deleted.
fn wanted(gsp: &GluesyncPlatform) -> Option<&DisasterRecoverySpec> {
    gsp.spec
        .disaster_recovery
        .as_ref()
        .filter(|_| gsp.metadata.deletion_timestamp.is_none())
}

/// A setup is changing workloads: updates wait for it, and it for them.
pub fn busy(dr: Option<&DisasterRecoveryStatus>) -> bool {
    dr.is_some_and(|s| {
        matches!(
            s.phase,
            Phase::SettingUp | Phase::RollingBack | Phase::TearingDown
        )
    })
}

/// Nothing of a setup is left in the cluster (so the finalizer may go).
pub fn settled(dr: Option<&DisasterRecoveryStatus>) -> bool {
    dr.is_none_or(|s| s.phase == Phase::Failed)
}

/// The workloads a setup changes: Core Hub, then every Chronos.
fn targets<'a>(obs: &Observed<'a>) -> Result<Vec<&'a Workload>, String> {
    let core: Vec<&Workload> = obs
        .workloads
        .iter()
        .filter(|w| w.component_type == Some(ComponentType::CoreHub))
        .collect();
    if core.len() != 1 {
        return Err(format!(
            "a disaster-recovery setup needs exactly one Core Hub workload, and {} are labelled core-hub",
            core.len()
        ));
    }
    let chronos = obs.workloads.iter().filter(|w| {
        w.component_type == Some(ComponentType::Module)
            && crate::api::version::ImageRef::parse(&w.image).name() == "gluesync-chronos"
    });
    let all: Vec<&Workload> = core.into_iter().chain(chronos).collect();
    if let Some(w) = all.iter().find(|w| w.container.is_none()) {
        return Err(format!(
            "{} {} has no container named by its gluesync.molo17.com/container annotation",
            w.kind_name(),
            w.name
        ));
    }
    Ok(all)
}

fn set_phase(dr: &mut DisasterRecoveryStatus, phase: Phase, message: String, obs: &Observed) {
    if dr.phase != phase {
        dr.since = obs.now.clone();
    }
    dr.phase = phase;
    dr.message = message;
}

fn workload<'a>(obs: &Observed<'a>, c: &DisasterRecoveryComponent) -> Option<&'a Workload> {
    obs.workloads
        .iter()
        .find(|w| w.name == c.name && w.kind == c.kind)
}

/// Starts a setup (or refuses it: Failed, with why), from no setup, a failed one, or an active one
/// whose settings changed.
fn start(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    spec: &DisasterRecoverySpec,
    previous: Option<&DisasterRecoveryStatus>,
    d: &mut Decision,
) {
    let mark = setup_mark(gsp, spec);
    let secret = secret_name(gsp, spec);
    let mut dr = DisasterRecoveryStatus {
        phase: Phase::SettingUp,
        role: spec.role,
        peer_address: spec.peer_address.clone(),
        setup: mark.clone(),
        secret_name: secret.clone(),
        service: previous.and_then(|p| p.service.clone()),
        service_settings: previous.and_then(|p| p.service_settings.clone()),
        service_selector: previous
            .map(|p| p.service_selector.clone())
            .unwrap_or_default(),
        message: String::new(),
        failure: None,
        since: obs.now.clone(),
        components: vec![],
    };
    let refused = match (&obs.dr.secret, targets(obs)) {
        (_, Err(why)) => Some(why),
        (SecretState::NotAllowed, _) => Some(format!(
            "GKO's installation does not allow it to read Secret {secret}: add it to the allowed Secrets \
             (the operator chart's disasterRecovery.enabled, or platform.disasterRecovery.secretName)"
        )),
        (SecretState::Missing, _) => Some(format!("Secret {secret} does not exist")),
        (SecretState::NoKey { .. }, _) => Some(format!(
            "Secret {secret} has no {DR_SECRET_KEY}: the pair's shared secret"
        )),
        (SecretState::Unreadable(why), _) => Some(format!("reading Secret {secret}: {why}")),
        (SecretState::Unknown, _) => Some(format!("Secret {secret} was not read")),
        (SecretState::Present { .. }, Ok(targets)) => {
            let mut why = None;
            for w in targets {
                let cname = w.container.clone().unwrap_or_default();
                let kept = previous
                    .and_then(|p| p.components.iter().find(|c| c.name == w.name))
                    .map(|c| c.original.clone());
                if kept.is_none() && why.is_none() {
                    why = collision(w, &cname, spec);
                }
                let original = kept.unwrap_or_else(|| {
                    serde_json::to_string(&env_now(w, &cname)).unwrap_or_default()
                });
                dr.components.push(DisasterRecoveryComponent {
                    name: w.name.clone(),
                    kind: w.kind,
                    container: cname,
                    original,
                    state: State::Pending,
                    changed_at: None,
                    stable: None,
                    message: None,
                });
            }
            why
        }
    };
    match refused {
        Some(why) if previous.is_some_and(|p| p.phase == Phase::Active) => {
            // An active pair keeps running as it is; the new settings are refused.
            let mut kept = previous.cloned().unwrap_or(dr);
            kept.message = format!("the new disaster-recovery settings are refused: {why}");
            d.event(
                true,
                crate::api::Reason::DisasterRecoveryRefused,
                kept.message.clone(),
            );
            d.status.disaster_recovery = Some(kept);
        }
        Some(why) => {
            dr.components.clear();
            dr.phase = Phase::Failed;
            dr.message = format!("the disaster-recovery setup is refused: {why}");
            d.event(
                true,
                crate::api::Reason::DisasterRecoveryRefused,
                dr.message.clone(),
            );
            d.status.disaster_recovery = Some(dr);
        }
        None => {
            let names: Vec<&str> = dr.components.iter().map(|c| c.name.as_str()).collect();
            dr.message = format!(
                "setting up this install as the {} of a disaster-recovery pair with {}: changing {}",
                spec.role.as_str(),
                spec.peer_address,
                names.join(", ")
            );
            d.event(
                false,
                crate::api::Reason::DisasterRecoveryStarted,
                dr.message.clone(),
            );
            d.status.disaster_recovery = Some(dr);
            d.again = true;
        }
    }
}

/// Carries the disaster-recovery setup one move on (no update runs).
pub(super) fn carry_on(gsp: &GluesyncPlatform, obs: &Observed, d: &mut Decision) {
    let want = wanted(gsp);
    let Some(mut dr) = d.status.disaster_recovery.clone() else {
        if let Some(spec) = want {
            start(gsp, obs, spec, None, d);
        }
        return;
    };
    let mark = want.map(|s| setup_mark(gsp, s));
    match dr.phase {
        Phase::Failed => match want {
            None => {
                // A refused setup may leave the Secret its request wrote: it goes with the setup.
                if removed(gsp, obs, &dr, d) {
                    d.status.disaster_recovery = None;
                }
            }
            Some(spec) if mark.as_deref() != Some(dr.setup.as_str()) => {
                start(gsp, obs, spec, None, d)
            }
            Some(_) => {}
        },
        Phase::Active | Phase::SettingUp => match want {
            None => {
                set_phase(
                    &mut dr,
                    Phase::TearingDown,
                    "taking the disaster-recovery pair down: putting the workloads back".into(),
                    obs,
                );
                d.event(
                    false,
                    crate::api::Reason::DisasterRecoveryTeardownStarted,
                    dr.message.clone(),
                );
                d.status.disaster_recovery = Some(dr);
                d.again = true;
            }
            Some(spec) if mark.as_deref() != Some(dr.setup.as_str()) => {
                start(gsp, obs, spec, Some(&dr), d)
            }
            Some(spec) if dr.phase == Phase::Active => active(gsp, obs, spec, dr, d),
            Some(spec) => setting_up(gsp, obs, spec, dr, d),
        },
        Phase::RollingBack | Phase::TearingDown => restore(gsp, obs, dr, d),
    }
    if busy(d.status.disaster_recovery.as_ref()) {
        show_busy(gsp, obs, d);
    }
}

/// An active pair: its workloads still carry it, its Service is there with the spec's settings.
fn active(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    spec: &DisasterRecoverySpec,
    mut dr: DisasterRecoveryStatus,
    d: &mut Decision,
) {
    let drifted: Vec<String> = dr
        .components
        .iter()
        .filter(|c| workload(obs, c).is_some_and(|w| w.dr_mark() != Some(dr.setup.as_str())))
        .map(|c| c.name.clone())
        .collect();
    if !drifted.is_empty() {
        for c in &mut dr.components {
            if drifted.contains(&c.name) {
                c.state = State::Pending;
                c.stable = None;
            }
        }
        let message = format!(
            "{} no longer carry the disaster-recovery setup (changed outside GKO); setting it again",
            drifted.join(", ")
        );
        d.event(
            true,
            crate::api::Reason::DisasterRecoveryDrift,
            message.clone(),
        );
        set_phase(&mut dr, Phase::SettingUp, message, obs);
        d.status.disaster_recovery = Some(dr);
        d.again = true;
        return;
    }
    let settings = service_digest(spec);
    if (!obs.dr.service || dr.service_settings.as_deref() != Some(settings.as_str()))
        && let Some(core) = dr.components.first().and_then(|c| workload(obs, c))
    {
        d.actions
            .push(Action::ApplyService(Box::new(service(gsp, spec, core))));
        dr.service_settings = Some(settings);
        dr.service_selector = core.selector.clone();
    }
    d.status.disaster_recovery = Some(dr);
}

/// One workload at a time gets the setup and passes its stability check; then the Service.
fn setting_up(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    spec: &DisasterRecoverySpec,
    mut dr: DisasterRecoveryStatus,
    d: &mut Decision,
) {
    let now = &obs.now;
    let mark = dr.setup.clone();
    let mut failed = None;
    let mut all_ready = true;
    for c in &mut dr.components {
        let Some(w) = workload(obs, c) else {
            failed = Some(format!("{} is gone", c.name));
            break;
        };
        match c.state {
            State::Ready if w.dr_mark() == Some(mark.as_str()) => continue,
            State::Ready | State::Pending | State::Restoring | State::Restored => {
                c.state = State::RollingOut;
                c.changed_at = Some(now.clone());
                c.stable = None;
                c.message = None;
                d.again = true;
                all_ready = false;
                break;
            }
            State::RollingOut => {
                all_ready = false;
                if w.dr_mark() != Some(mark.as_str()) {
                    // Written before the change, or the change was lost: (again) make it.
                    d.actions.push(Action::PatchWorkload {
                        kind: w.kind,
                        name: w.name.clone(),
                        patch: patch(gsp, w, c, Some((spec, &mark))),
                    });
                    d.requeue(std::time::Duration::from_secs(1));
                    break;
                }
                let since = c.changed_at.clone().unwrap_or_else(|| now.clone());
                let deadline = plus(&since, gsp.spec.stability_timeout_seconds);
                let on_setup =
                    |p: &crate::update::observed::PodView| p.dr_mark.as_deref() == Some(&mark);
                match super::rollout::stable_on(
                    gsp,
                    &mut c.stable,
                    w,
                    &on_setup,
                    true,
                    &deadline,
                    now,
                    d,
                ) {
                    Ok(true) => {
                        c.state = State::Ready;
                        c.stable = None;
                        d.event(
                            false,
                            crate::api::Reason::DisasterRecoveryWorkloadReady,
                            format!(
                                "{} {} carries the disaster-recovery setup and passed its stability check",
                                w.kind_name(),
                                w.name
                            ),
                        );
                        d.again = true;
                        continue;
                    }
                    Ok(false) => break,
                    Err(why) => {
                        c.message = Some(why.clone());
                        failed = Some(format!(
                            "{} {} did not come up with the setup: {why}",
                            w.kind_name(),
                            w.name
                        ));
                        break;
                    }
                }
            }
        }
    }
    if let Some(why) = failed {
        d.event(
            true,
            crate::api::Reason::DisasterRecoveryFailed,
            format!("{why}; putting every change back"),
        );
        dr.failure = Some(why.clone());
        set_phase(&mut dr, Phase::RollingBack, why, obs);
        d.again = true;
    } else if all_ready {
        if obs.dr.service {
            let message = format!(
                "this install is the {} of a disaster-recovery pair with {}; Service {} publishes ports {} and {}",
                spec.role.as_str(),
                spec.peer_address,
                service_name(gsp),
                spec.replication_port,
                spec.control_port
            );
            d.event(
                false,
                crate::api::Reason::DisasterRecoveryActive,
                message.clone(),
            );
            set_phase(&mut dr, Phase::Active, message, obs);
            dr.service = Some(service_name(gsp));
        } else if let Some(core) = dr.components.first().and_then(|c| workload(obs, c)) {
            d.actions
                .push(Action::ApplyService(Box::new(service(gsp, spec, core))));
            dr.service_settings = Some(service_digest(spec));
            dr.service_selector = core.selector.clone();
            dr.message = format!(
                "the workloads carry the setup; publishing ports {} and {} with Service {}",
                spec.replication_port,
                spec.control_port,
                service_name(gsp)
            );
            d.requeue(std::time::Duration::from_secs(1));
        }
    } else if let Some(c) = dr.components.iter().find(|c| c.state == State::RollingOut) {
        dr.message = format!(
            "setting up this install as the {} of a disaster-recovery pair: {} rolls out",
            spec.role.as_str(),
            c.name
        );
    }
    d.status.disaster_recovery = Some(dr);
}

/// Puts every workload back as it was (last changed first), then removes the Service and empties the pair's Secret;
/// ends Failed (a rollback) or with no setup (a teardown).
fn restore(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    mut dr: DisasterRecoveryStatus,
    d: &mut Decision,
) {
    let now = &obs.now;
    for c in dr.components.iter_mut().rev() {
        if c.state == State::Restored {
            continue;
        }
        let Some(w) = workload(obs, c) else {
            c.state = State::Restored;
            continue;
        };
        if c.state != State::Restoring {
            if clean(w, c) {
                c.state = State::Restored;
                continue;
            }
            c.state = State::Restoring;
            c.changed_at = Some(now.clone());
            c.stable = None;
            d.again = true;
            break;
        }
        if !clean(w, c) {
            d.actions.push(Action::PatchWorkload {
                kind: w.kind,
                name: w.name.clone(),
                patch: patch(gsp, w, c, None),
            });
            d.requeue(std::time::Duration::from_secs(1));
            break;
        }
        if w.kind == WorkloadKind::StatefulSet {
            // Pods of the setup that do not come up would hold the rollback up: they go.
            for p in w.pods.iter().filter(|p| p.dr_mark.is_some() && !p.ready) {
                d.actions.push(Action::DeletePod(p.name.clone()));
            }
        }
        let since = c.changed_at.clone().unwrap_or_else(|| now.clone());
        let deadline = plus(&since, gsp.spec.stability_timeout_seconds);
        let as_before = |p: &crate::update::observed::PodView| p.dr_mark.is_none();
        match super::rollout::stable_on(gsp, &mut c.stable, w, &as_before, true, &deadline, now, d)
        {
            Ok(true) => {
                c.state = State::Restored;
                c.stable = None;
                d.again = true;
                continue;
            }
            Ok(false) => break,
            Err(why) => {
                // Nothing older to go back to: said, and the rest goes on.
                d.event(
                    true,
                    crate::api::Reason::DisasterRecoveryRestoreNotStable,
                    format!(
                        "{} {} is back as it was before the setup but did not pass its stability check: {why}",
                        w.kind_name(),
                        w.name
                    ),
                );
                c.message = Some(why);
                c.state = State::Restored;
                d.again = true;
                continue;
            }
        }
    }
    let all_back = dr.components.iter().all(|c| c.state == State::Restored);
    if !all_back {
        if let Some(c) = dr.components.iter().find(|c| c.state == State::Restoring) {
            dr.message = match dr.phase {
                Phase::RollingBack => format!(
                    "the disaster-recovery setup failed ({}); putting {} back",
                    dr.failure
                        .as_deref()
                        .unwrap_or("a workload did not come up"),
                    c.name
                ),
                _ => format!(
                    "taking the disaster-recovery pair down: putting {} back",
                    c.name
                ),
            };
        }
        d.status.disaster_recovery = Some(dr);
        return;
    }
    // The workloads are back: the Service goes and the pair's Secret is emptied, then the phase ends.
    if !removed(gsp, obs, &dr, d) {
        d.status.disaster_recovery = Some(dr);
        return;
    }
    match dr.phase {
        Phase::RollingBack => {
            let why = dr
                .failure
                .clone()
                .unwrap_or_else(|| "a workload did not come up".into());
            let message = format!(
                "the disaster-recovery setup failed and was rolled back: {why}; every workload is as it \
                 was before, and the Service is removed and the shared secret GKO wrote is taken out of its Secret"
            );
            d.event(
                true,
                crate::api::Reason::DisasterRecoveryRolledBack,
                message.clone(),
            );
            set_phase(&mut dr, Phase::Failed, message, obs);
            dr.service = None;
            dr.service_settings = None;
            dr.service_selector.clear();
            dr.components.clear();
            d.status.disaster_recovery = Some(dr);
        }
        _ => {
            d.event(
                false,
                crate::api::Reason::DisasterRecoveryRemoved,
                "the disaster-recovery pair is taken down: the workloads are as they were before it, and \
                 the Service is removed and the shared secret GKO wrote is taken out of its Secret",
            );
            d.status.disaster_recovery = None;
            d.again = true;
        }
    }
}

/// The Service is gone and the pair's Secret holds no setup's secret; else their removal is asked for.
fn removed(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    dr: &DisasterRecoveryStatus,
    d: &mut Decision,
) -> bool {
    let secret_left = matches!(
        obs.dr.secret,
        SecretState::Present { made_by_gko: true } | SecretState::NoKey { made_by_gko: true }
    );
    if obs.dr.service {
        d.actions
            .push(Action::RemoveMade(Made::Service, service_name(gsp)));
    }
    if secret_left {
        d.actions
            .push(Action::RemoveMade(Made::Secret, dr.secret_name.clone()));
    }
    if obs.dr.service || secret_left {
        d.requeue(std::time::Duration::from_secs(1));
        return false;
    }
    true
}

/// While a setup changes workloads, the platform's conditions say so.
fn show_busy(gsp: &GluesyncPlatform, obs: &Observed, d: &mut Decision) {
    let Some(dr) = &d.status.disaster_recovery else {
        return;
    };
    let generation = gsp.metadata.generation.unwrap_or(0);
    let reason = format!("DisasterRecovery{}", dr.phase.as_str());
    let message = dr.message.clone();
    let previous = d.status.conditions.clone();
    d.status.message = Some(message.clone());
    d.status.conditions = [(READY, false), (RECONCILING, true), (STALLED, false)]
        .into_iter()
        .map(|(t, v)| {
            crate::update::status::condition(
                &previous, t, v, &reason, &message, generation, &obs.now,
            )
        })
        .collect();
}

#[cfg(test)]
mod tests;
