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

use serde_json::{Value, json};

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

fn containers(w: &Workload) -> &[k8s_openapi::api::core::v1::Container] {
    w.template
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
}

fn container<'a>(w: &'a Workload, name: &str) -> Option<&'a k8s_openapi::api::core::v1::Container> {
    containers(w).iter().find(|c| c.name == name)
}

fn volumes(w: &Workload) -> &[k8s_openapi::api::core::v1::Volume] {
    w.template
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default()
}

/// The environment entries with the setup's names that `w`'s container carries now, as JSON.
fn env_now(w: &Workload, name: &str) -> Vec<Value> {
    container(w, name)
        .and_then(|c| c.env.as_ref())
        .into_iter()
        .flatten()
        .filter(|e| ENV.contains(&e.name.as_str()))
        .filter_map(|e| serde_json::to_value(e).ok())
        .collect()
}

/// Why this workload's template cannot take a setup: it has ports, a mount or a volume of the
/// setup's names or numbers that no GKO setup put there (a setup made by hand, for one).
fn collision(w: &Workload, cname: &str, spec: &DisasterRecoverySpec) -> Option<String> {
    if w.dr_mark().is_some() {
        return None;
    }
    let c = container(w, cname)?;
    let ports = [spec.replication_port, spec.control_port];
    let what = if let Some(p) = c.ports.iter().flatten().find(|p| {
        ports.contains(&p.container_port)
            || p.name
                .as_deref()
                .is_some_and(|n| n == REPLICATION_PORT_NAME || n == CONTROL_PORT_NAME)
    }) {
        format!(
            "container port {} ({})",
            p.container_port,
            p.name.as_deref().unwrap_or("unnamed")
        )
    } else if let Some(m) = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == VOLUME || m.mount_path == MOUNT_PATH)
    {
        format!("volume mount {} at {}", m.name, m.mount_path)
    } else if volumes(w).iter().any(|v| v.name == VOLUME) {
        format!("volume {VOLUME}")
    } else {
        return None;
    };
    Some(format!(
        "{} {} already has {what}, which a disaster-recovery setup uses; a setup made by hand \
         (the kit's values) must be taken out before GKO sets one up",
        w.kind_name(),
        w.name
    ))
}

/// The strategic merge patch that gives `w` the setup (`Some`), or puts back `original` (`None`), from
/// what its template carries now.
fn patch(
    gsp: &GluesyncPlatform,
    w: &Workload,
    c: &DisasterRecoveryComponent,
    setup: Option<(&DisasterRecoverySpec, &str)>,
) -> Value {
    let original: Vec<Value> = serde_json::from_str(&c.original).unwrap_or_default();
    let current = container(w, &c.container);
    let mut env = vec![];
    let mut ports = vec![];
    let mut mounts = vec![];
    let mut vols = vec![];
    let wanted_ports: Vec<i32> = setup
        .map(|(s, _)| vec![s.replication_port, s.control_port])
        .unwrap_or_default();
    // Ports and the mount of a setup leave when no longer wanted.
    for p in current.and_then(|c| c.ports.as_ref()).into_iter().flatten() {
        let ours = p
            .name
            .as_deref()
            .is_some_and(|n| n == REPLICATION_PORT_NAME || n == CONTROL_PORT_NAME);
        if ours && !wanted_ports.contains(&p.container_port) {
            ports.push(json!({"containerPort": p.container_port, "$patch": "delete"}));
        }
    }
    match setup {
        Some((spec, _)) => {
            let values = [
                "true".to_string(),
                spec.role.as_str().to_string(),
                spec.peer_address.clone(),
                spec.replication_port.to_string(),
                spec.control_port.to_string(),
                format!("{MOUNT_PATH}/{DR_SECRET_KEY}"),
            ];
            for (name, value) in ENV.iter().zip(values) {
                env.push(json!({"name": name, "value": value, "valueFrom": null}));
            }
            for (name, port) in [
                (REPLICATION_PORT_NAME, spec.replication_port),
                (CONTROL_PORT_NAME, spec.control_port),
            ] {
                ports.push(json!({"name": name, "containerPort": port, "protocol": "TCP"}));
            }
            mounts.push(json!({"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": true}));
            vols.push(json!({"name": VOLUME, "secret": {
                "secretName": secret_name(gsp, spec),
                "defaultMode": 0o400,
            }}));
        }
        None => {
            for name in ENV {
                let before = original.iter().find(|e| e["name"] == name);
                let now = current
                    .and_then(|c| c.env.as_ref())
                    .is_some_and(|env| env.iter().any(|e| e.name == name));
                match before {
                    Some(_) if super::mutated(super::Mutant::RestoreForgets) => {
                        env.push(json!({"name": name, "$patch": "delete"}));
                    }
                    Some(entry) => {
                        let mut entry = entry.clone();
                        for key in ["value", "valueFrom"] {
                            if entry.get(key).is_none() {
                                entry[key] = Value::Null;
                            }
                        }
                        env.push(entry);
                    }
                    None if now => env.push(json!({"name": name, "$patch": "delete"})),
                    None => {}
                }
            }
            for m in current
                .and_then(|c| c.volume_mounts.as_ref())
                .into_iter()
                .flatten()
            {
                if m.name == VOLUME {
                    mounts.push(json!({"mountPath": m.mount_path, "$patch": "delete"}));
                }
            }
            if volumes(w).iter().any(|v| v.name == VOLUME) {
                vols.push(json!({"name": VOLUME, "$patch": "delete"}));
            }
        }
    }
    let mut template = json!({
        "metadata": {"annotations": {DR_ANNOTATION: setup.map(|(_, mark)| mark)}},
        "spec": {
            "containers": [{
                "name": c.container,
                "env": env,
                "ports": ports,
                "volumeMounts": mounts,
            }],
            "volumes": vols,
        },
    });
    strip_empty(&mut template);
    json!({"spec": {"template": template}})
}

/// Drops empty lists from a patch (an empty list would replace the workload's list).
fn strip_empty(v: &mut Value) {
    if let Value::Object(map) = v {
        map.retain(|_, x| !matches!(x, Value::Array(a) if a.is_empty()));
        for x in map.values_mut() {
            strip_empty(x);
        }
    } else if let Value::Array(items) = v {
        for x in items {
            strip_empty(x);
        }
    }
}

/// `w` carries nothing of a setup: no mark, none of its ports, mount or volume, and the environment as
/// it was.
fn clean(w: &Workload, c: &DisasterRecoveryComponent) -> bool {
    let original: Vec<Value> = serde_json::from_str(&c.original).unwrap_or_default();
    let Some(cont) = container(w, &c.container) else {
        return true;
    };
    w.dr_mark().is_none()
        && !cont.ports.iter().flatten().any(|p| {
            p.name
                .as_deref()
                .is_some_and(|n| n == REPLICATION_PORT_NAME || n == CONTROL_PORT_NAME)
        })
        && !cont
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == VOLUME)
        && !volumes(w).iter().any(|v| v.name == VOLUME)
        && env_now(w, &c.container) == original
}

/// The Service that publishes the pair's two ports, in front of Core Hub's pods.
fn service(
    gsp: &GluesyncPlatform,
    spec: &DisasterRecoverySpec,
    core: &Workload,
) -> k8s_openapi::api::core::v1::Service {
    use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use kube::Resource;
    let s = &spec.service;
    let external = s.type_ != crate::api::ServiceType::ClusterIP;
    let port = |name: &str, number: i32, node_port: Option<i32>| ServicePort {
        name: Some(name.to_string()),
        port: number,
        target_port: Some(IntOrString::Int(number)),
        protocol: Some("TCP".into()),
        node_port: node_port.filter(|_| external),
        ..Default::default()
    };
    let mut meta = kube::core::ObjectMeta {
        name: Some(service_name(gsp)),
        namespace: gsp.metadata.namespace.clone(),
        labels: Some(
            [
                (MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string()),
                (
                    PLATFORM_LABEL.to_string(),
                    gsp.metadata.name.clone().unwrap_or_default(),
                ),
            ]
            .into(),
        ),
        owner_references: gsp.controller_owner_ref(&()).map(|o| vec![o]),
        ..Default::default()
    };
    if !s.annotations.is_empty() {
        meta.annotations = Some(s.annotations.clone());
    }
    Service {
        metadata: meta,
        spec: Some(ServiceSpec {
            type_: Some(s.type_.as_str().to_string()),
            selector: Some(core.selector.clone()),
            ports: Some(vec![
                port(
                    REPLICATION_PORT_NAME,
                    spec.replication_port,
                    s.replication_node_port,
                ),
                port(CONTROL_PORT_NAME, spec.control_port, s.control_node_port),
            ]),
            load_balancer_class: s
                .load_balancer_class
                .clone()
                .filter(|_| s.type_ == crate::api::ServiceType::LoadBalancer),
            load_balancer_source_ranges: (!s.load_balancer_source_ranges.is_empty()
                && s.type_ == crate::api::ServiceType::LoadBalancer)
                .then(|| s.load_balancer_source_ranges.clone()),
            external_traffic_policy: s.external_traffic_policy.clone().filter(|_| external),
            ..Default::default()
        }),
        status: None,
    }
}

/// A digest of the Service's settings: a change of them is written to the Service of an active pair.
fn service_digest(spec: &DisasterRecoverySpec) -> String {
    let text = serde_json::to_string(&spec.service).unwrap_or_default();
    crate::api::ids::digest(&[text])
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
mod tests {
    use super::*;
    use crate::api::Reason;
    use crate::api::{DisasterRecoveryRole, DisasterRecoveryService};
    use crate::update::fixtures::{at, let_go_before, observed, pod};
    use crate::update::observed::PodView;

    fn core_hub(template: Value) -> Workload {
        Workload {
            kind: WorkloadKind::StatefulSet,
            name: "core-hub".into(),
            uid: "u".into(),
            component_type: Some(ComponentType::CoreHub),
            label_value: "core-hub".into(),
            container: Some("c".into()),
            image: "molo17/gluesync-core-hub:2.3.2.1".into(),
            ready: true,
            progress_deadline_exceeded: false,
            rollout_blocker: None,
            pods: vec![],
            self_update_mark: None,
            template: Box::new(serde_json::from_value(template).unwrap()),
            selector: Default::default(),
        }
    }

    fn spec() -> DisasterRecoverySpec {
        DisasterRecoverySpec {
            role: DisasterRecoveryRole::Primary,
            peer_address: "peer".into(),
            replication_port: 1718,
            control_port: 1719,
            secret_name: None,
            revision: None,
            service: DisasterRecoveryService::default(),
        }
    }

    fn gsp() -> GluesyncPlatform {
        let mut g = GluesyncPlatform::new(
            "gluesync",
            serde_json::from_value(json!({"version": "2.3.2.1"})).unwrap(),
        );
        g.metadata.namespace = Some("ns".into());
        g
    }

    fn component(w: &Workload) -> DisasterRecoveryComponent {
        DisasterRecoveryComponent {
            name: w.name.clone(),
            kind: w.kind,
            container: "c".into(),
            original: serde_json::to_string(&env_now(w, "c")).unwrap(),
            state: State::RollingOut,
            changed_at: None,
            stable: None,
            message: None,
        }
    }

    #[test]
    fn an_entry_that_was_there_before_is_put_back_as_it_was_and_the_rest_leaves() {
        let before = core_hub(json!({"spec": {"containers": [{"name": "c", "env": [
            {"name": "A", "value": "1"},
            {"name": "GLUESYNC_DR_ROLE", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "role"}}},
        ]}]}}));
        let c = component(&before);
        let set = patch(&gsp(), &before, &c, Some((&spec(), "primary-x")));
        let env = &set["spec"]["template"]["spec"]["containers"][0]["env"];
        let role = env
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "GLUESYNC_DR_ROLE")
            .unwrap();
        assert_eq!(role["value"], "primary");
        assert!(
            role["valueFrom"].is_null() && role.get("valueFrom").is_some(),
            "valueFrom is removed: {role}"
        );
        assert_eq!(
            set["spec"]["template"]["metadata"]["annotations"][DR_ANNOTATION],
            "primary-x"
        );

        // The workload as the setup left it.
        let after = core_hub(json!({
            "metadata": {"annotations": {DR_ANNOTATION: "primary-x"}},
            "spec": {"containers": [{"name": "c",
                "env": [{"name": "A", "value": "1"}, {"name": "GLUESYNC_DR_ROLE", "value": "primary"},
                        {"name": "GLUESYNC_DR_ENABLED", "value": "true"}],
                "ports": [{"name": "dr-replication", "containerPort": 1718}, {"name": "dr-control", "containerPort": 1719}],
                "volumeMounts": [{"name": VOLUME, "mountPath": MOUNT_PATH}]}],
                "volumes": [{"name": VOLUME, "secret": {"secretName": "s"}}]}}));
        assert!(!clean(&after, &c));
        let back = patch(&gsp(), &after, &c, None);
        let t = &back["spec"]["template"];
        assert!(t["metadata"]["annotations"][DR_ANNOTATION].is_null());
        let env = t["spec"]["containers"][0]["env"].as_array().unwrap();
        let role = env
            .iter()
            .find(|e| e["name"] == "GLUESYNC_DR_ROLE")
            .unwrap();
        assert_eq!(
            role["valueFrom"]["configMapKeyRef"]["key"], "role",
            "put back as it was"
        );
        assert!(
            role["value"].is_null() && role.get("value").is_some(),
            "the value set goes: {role}"
        );
        let enabled = env
            .iter()
            .find(|e| e["name"] == "GLUESYNC_DR_ENABLED")
            .unwrap();
        assert_eq!(enabled["$patch"], "delete");
        assert!(
            !env.iter().any(|e| e["name"] == "A"),
            "untouched entries are not in the patch"
        );
        let ports = t["spec"]["containers"][0]["ports"].as_array().unwrap();
        assert_eq!(ports.len(), 2);
        assert!(ports.iter().all(|p| p["$patch"] == "delete"));
        assert_eq!(t["spec"]["volumes"][0]["$patch"], "delete");
        assert_eq!(
            t["spec"]["containers"][0]["volumeMounts"][0]["$patch"],
            "delete"
        );
        assert!(clean(&before, &c));
    }

    #[test]
    fn a_template_with_the_setups_ports_that_gko_did_not_put_there_is_refused() {
        let by_hand = core_hub(json!({"spec": {"containers": [{"name": "c",
            "ports": [{"name": "dr-replication", "containerPort": 1718}]}]}}));
        let why = collision(&by_hand, "c", &spec()).expect("refused");
        assert!(why.contains("by hand"), "{why}");
        let udp = core_hub(json!({"spec": {"containers": [{"name": "c",
            "ports": [{"containerPort": 1719, "protocol": "UDP"}]}]}}));
        assert!(collision(&udp, "c", &spec()).is_some());
        let plain = core_hub(json!({"spec": {"containers": [{"name": "c",
            "ports": [{"containerPort": 1717}]}]}}));
        assert_eq!(collision(&plain, "c", &spec()), None);
        // A port is the setup's by its name alone, whatever its number.
        for name in ["dr-replication", "dr-control"] {
            let named = core_hub(json!({"spec": {"containers": [{"name": "c",
                "ports": [{"name": name, "containerPort": 9999}]}]}}));
            let why = collision(&named, "c", &spec()).expect(name);
            assert!(
                why.contains(&format!("container port 9999 ({name})")),
                "{why}"
            );
        }
        let http = core_hub(json!({"spec": {"containers": [{"name": "c",
            "ports": [{"name": "http", "containerPort": 8080}]}]}}));
        assert_eq!(collision(&http, "c", &spec()), None);
        // The same ports under GKO's mark are a setup of GKO's, which a new setup may change.
        let by_gko = core_hub(json!({
            "metadata": {"annotations": {DR_ANNOTATION: "primary-0123"}},
            "spec": {"containers": [{"name": "c",
                "ports": [{"name": "dr-replication", "containerPort": 1718}]}]}}));
        assert_eq!(by_gko.dr_mark(), Some("primary-0123"));
        assert_eq!(collision(&by_gko, "c", &spec()), None);
    }

    /// A status whose disaster-recovery setup `setup` is in `phase`, changing one component.
    fn with_setup(
        phase: Phase,
        setup: &str,
        c: DisasterRecoveryComponent,
    ) -> crate::api::GluesyncPlatformStatus {
        crate::api::GluesyncPlatformStatus {
            disaster_recovery: Some(DisasterRecoveryStatus {
                phase,
                role: DisasterRecoveryRole::Primary,
                peer_address: "peer".into(),
                setup: setup.into(),
                secret_name: "s".into(),
                service: None,
                service_settings: None,
                service_selector: Default::default(),
                message: format!("the setup is {}", phase.as_str()),
                failure: None,
                since: at(0),
                components: vec![c],
            }),
            ..Default::default()
        }
    }

    /// Core Hub before any setup: its container alone.
    fn before_setup() -> Workload {
        core_hub(json!({"spec": {"containers": [{"name": "c"}]}}))
    }

    /// Core Hub as a setup left it (its mark and one variable), its pod up on it.
    fn left_by_setup() -> Workload {
        carrying("primary-x", true)
    }

    /// The decision at second `t` on these workloads.
    fn decide_at(g: &GluesyncPlatform, workloads: &[Workload], t: i64) -> Decision {
        decide_seeing(g, workloads, t, DrObjects::default())
    }

    /// The decision at second `t` on these workloads, the pair's Secret and Service as `dr` says.
    fn decide_seeing(
        g: &GluesyncPlatform,
        workloads: &[Workload],
        t: i64,
        dr: DrObjects,
    ) -> Decision {
        let report = Default::default();
        crate::update::decide(
            g,
            &Observed {
                dr,
                ..observed(workloads, &report, at(t))
            },
        )
    }

    /// Decides at second `t` and keeps the status the decision writes, as GKO does; returns the
    /// decision and the setup it leaves.
    fn decide_and_write(
        g: &mut GluesyncPlatform,
        workloads: &[Workload],
        t: i64,
        dr: DrObjects,
    ) -> (Decision, Option<DisasterRecoveryStatus>) {
        let d = decide_seeing(g, workloads, t, dr);
        g.status = Some(d.status.clone());
        let setup = d.status.disaster_recovery.clone();
        (d, setup)
    }

    /// A platform that wants the setup `spec()`, with a 10 s stability window and a 60 s timeout; and
    /// the setup's mark.
    fn wanting() -> (GluesyncPlatform, String) {
        let mut g = gsp();
        g.spec.disaster_recovery = Some(spec());
        g.spec.stability_window_seconds = 10;
        g.spec.stability_timeout_seconds = 60;
        g.metadata.finalizers = Some(vec![crate::api::FINALIZER.into()]);
        let mark = setup_mark(&g, &spec());
        (g, mark)
    }

    /// `w` with one pod, ready or not, on the setup `mark` or on none.
    fn with_pod(mut w: Workload, ready: bool, mark: Option<&str>) -> Workload {
        w.ready = ready;
        w.pods = vec![PodView {
            dr_mark: mark.map(Into::into),
            ..pod(&w.name, &w.image, ready, 0)
        }];
        w
    }

    /// Core Hub whose template carries the setup `mark` (and one of its variables), its pod on it,
    /// ready or not.
    fn carrying(mark: &str, ready: bool) -> Workload {
        let w = core_hub(json!({
            "metadata": {"annotations": {DR_ANNOTATION: mark}},
            "spec": {"containers": [{"name": "c",
                "env": [{"name": "GLUESYNC_DR_ENABLED", "value": "true"}]}]}}));
        with_pod(w, ready, Some(mark))
    }

    /// Core Hub as it was before the setup, its pod ready or not, on the setup `mark` or on none.
    fn put_back(ready: bool, mark: Option<&str>) -> Workload {
        with_pod(before_setup(), ready, mark)
    }

    /// `w` (built as Core Hub) as the Chronos module.
    fn as_chronos(w: Workload) -> Workload {
        let pods = w
            .pods
            .iter()
            .map(|p| PodView {
                name: "chronos-0".into(),
                uid: "chronos-0-uid".into(),
                ..p.clone()
            })
            .collect();
        Workload {
            name: "chronos".into(),
            uid: "chronos-uid".into(),
            component_type: Some(ComponentType::Module),
            label_value: "chronos".into(),
            image: "molo17/gluesync-chronos:0.3.2".into(),
            pods,
            ..w
        }
    }

    /// The pair's Secret as `secret`, its Service there or not.
    fn objects(secret: SecretState, service: bool) -> DrObjects {
        DrObjects { secret, service }
    }

    /// A Secret of the user's holding the shared secret.
    fn users() -> SecretState {
        SecretState::Present { made_by_gko: false }
    }

    /// The events of `d` with this reason: (warning, message).
    fn said(d: &Decision, reason: Reason) -> Vec<(bool, String)> {
        d.events
            .iter()
            .filter(|e| e.reason == reason)
            .map(|e| (e.warning, e.message.clone()))
            .collect()
    }

    /// The workloads `d` patches, by name.
    fn patched(d: &Decision) -> Vec<&str> {
        d.actions
            .iter()
            .filter_map(|a| match a {
                Action::PatchWorkload { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The patch `d` makes to the workload `name`.
    fn patch_of<'d>(d: &'d Decision, name: &str) -> Option<&'d Value> {
        d.actions.iter().find_map(|a| match a {
            Action::PatchWorkload { name: n, patch, .. } if n == name => Some(patch),
            _ => None,
        })
    }

    /// The Services `d` writes.
    fn services(d: &Decision) -> Vec<&k8s_openapi::api::core::v1::Service> {
        d.actions
            .iter()
            .filter_map(|a| match a {
                Action::ApplyService(s) => Some(&**s),
                _ => None,
            })
            .collect()
    }

    /// What `d` asks removed of what a setup made.
    fn removes(d: &Decision) -> Vec<&Action> {
        d.actions
            .iter()
            .filter(|a| matches!(a, Action::RemoveMade(..)))
            .collect()
    }

    /// The pods `d` deletes.
    fn deleted(d: &Decision) -> Vec<&str> {
        d.actions
            .iter()
            .filter_map(|a| match a {
                Action::DeletePod(p) => Some(p.as_str()),
                _ => None,
            })
            .collect()
    }

    /// `d` patches no workload, writes no Service, removes nothing a setup made and deletes no pod.
    fn changes_nothing(d: &Decision) -> bool {
        patched(d).is_empty()
            && services(d).is_empty()
            && removes(d).is_empty()
            && deleted(d).is_empty()
    }

    /// `d` says nothing of disaster recovery.
    fn says_nothing_of_the_pair(d: &Decision) -> bool {
        d.events
            .iter()
            .all(|e| !<&str>::from(e.reason).starts_with("DisasterRecovery"))
    }

    /// A setup changes Core Hub and every Chronos (by its image's name, whatever its registry), no other
    /// module.
    #[test]
    fn a_setup_changes_core_hub_and_every_chronos_only() {
        use crate::update::fixtures::{install, workload};
        let mut w = install();
        w.push(workload(
            "chronos-eu",
            "module",
            "registry.example.com/molo17/gluesync-chronos:0.3.2",
        ));
        w.push(workload("prometheus", "module", "molo17/prometheus:2.53.0"));
        let report = Default::default();
        let all = targets(&observed(&w, &report, at(0))).unwrap();
        let names: Vec<&str> = all.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["core-hub", "chronos", "chronos-eu"]);
    }

    /// An update the spec asks for waits while a setup changes workloads, and the status says what the
    /// setup does; once the pair is active, the update starts.
    #[test]
    fn an_update_waits_while_a_setup_changes_workloads() {
        let mut g = gsp();
        g.spec.version = "2.3.2.2".into();
        g.spec.disaster_recovery = Some(spec());
        let mark = setup_mark(&g, &spec());
        let w = before_setup();
        for phase in [Phase::SettingUp, Phase::RollingBack, Phase::TearingDown] {
            // Setting up, Core Hub is not changed yet; put back, it still carries the setup.
            let now = match phase {
                Phase::SettingUp => w.clone(),
                _ => left_by_setup(),
            };
            g.status = Some(with_setup(phase, &mark, component(&w)));
            let d = decide_at(&g, &[now], 0);
            assert!(
                d.status.update.is_none(),
                "{phase:?}: {:?}",
                d.status.update
            );
            let reconciling = d
                .status
                .conditions
                .iter()
                .find(|c| c.type_ == RECONCILING)
                .unwrap();
            assert_eq!(
                (reconciling.status.as_str(), reconciling.reason.as_str()),
                (
                    "True",
                    format!("DisasterRecovery{}", phase.as_str()).as_str()
                ),
            );
        }
        g.status = Some(with_setup(Phase::Active, &mark, component(&w)));
        let d = decide_at(&g, &[w], 0);
        assert!(
            d.status.update.is_some(),
            "the update starts once the pair is active"
        );
    }

    /// A deleted platform whose teardown cannot put a workload back (its patch never lands) keeps GKO's
    /// finalizer for the pipelines' deadline and four stability timeouts after the deletion, then goes,
    /// and says what was left.
    #[test]
    fn a_teardown_that_never_ends_holds_a_deleted_platform_four_stability_timeouts() {
        let mut g = gsp();
        g.spec.drain_timeout_seconds = 30;
        g.spec.stability_timeout_seconds = 60;
        g.metadata.finalizers = Some(vec![crate::api::FINALIZER.into()]);
        g.metadata.deletion_timestamp = Some(at(0));
        // Core Hub as it was before the setup, and as the setup left it; the teardown began as the
        // platform was deleted.
        let before = before_setup();
        let mut c = component(&before);
        c.state = State::Restoring;
        c.changed_at = Some(at(0));
        let after = left_by_setup();
        assert!(!clean(&after, &c));
        g.status = Some(with_setup(Phase::TearingDown, "primary-x", c));
        let workloads = [after];
        let decide = |t: i64| decide_at(&g, &workloads, t);
        for t in [1, 31, 95, 269] {
            let d = decide(t);
            assert!(
                d.actions
                    .iter()
                    .any(|a| matches!(a, Action::PatchWorkload { .. })),
                "at {t} s the teardown puts the workload back: {:?}",
                d.actions
            );
            assert!(
                !d.actions.contains(&Action::RemoveFinalizer),
                "let go at {t} s"
            );
        }
        let warning = let_go_before(&decide(270), "the disaster-recovery teardown");
        assert!(warning.contains("four stability timeouts"), "{warning}");
    }

    /// The pair's Secret is `<platform>-disaster-recovery` unless the spec names one, and the setup
    /// mounts that one; the Service is `<platform>-disaster-recovery`.
    #[test]
    fn the_pairs_secret_and_service_are_named_after_the_platform() {
        let mut g = gsp();
        g.metadata.name = Some("prod".into());
        let mut s = spec();
        assert_eq!(secret_name(&g, &s), "prod-disaster-recovery");
        assert_eq!(default_secret_name(&g), "prod-disaster-recovery");
        assert_eq!(service_name(&g), "prod-disaster-recovery");
        s.secret_name = Some("dr-shared".into());
        assert_eq!(secret_name(&g, &s), "dr-shared");
        assert_eq!(default_secret_name(&g), "prod-disaster-recovery");
        let w = before_setup();
        let set = patch(&g, &w, &component(&w), Some((&s, "primary-x")));
        assert_eq!(
            set["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
            "dr-shared"
        );
    }

    #[test]
    fn the_setup_mark_changes_with_what_changes_the_pods_only() {
        let g = gsp();
        let a = setup_mark(&g, &spec());
        assert!(a.starts_with("primary-"));
        let mut s = spec();
        s.service.annotations.insert("x".into(), "y".into());
        assert_eq!(
            setup_mark(&g, &s),
            a,
            "Service settings do not roll the pods"
        );
        s.revision = Some("r2".into());
        assert_ne!(setup_mark(&g, &s), a);
        let mut s = spec();
        s.peer_address = "other".into();
        assert_ne!(setup_mark(&g, &s), a);
    }

    /// The Service publishes both ports to Core Hub's pods with the spec's settings; settings of an
    /// external Service (node ports, traffic policy) and of a load balancer only where they apply.
    #[test]
    fn the_service_publishes_both_ports_with_the_settings_that_apply_to_its_type() {
        use crate::api::ServiceType;
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        let mut g = gsp();
        g.metadata.uid = Some("uid".into());
        let mut core = before_setup();
        core.selector = [("app".to_string(), "core-hub".to_string())].into();
        let mut s = spec();
        s.service = DisasterRecoveryService {
            type_: ServiceType::LoadBalancer,
            annotations: [("lb".to_string(), "internal".to_string())].into(),
            load_balancer_class: Some("cloud".into()),
            load_balancer_source_ranges: vec!["10.0.0.0/8".into()],
            external_traffic_policy: Some("Local".into()),
            replication_node_port: Some(31718),
            control_node_port: Some(31719),
        };
        let lb = service(&g, &s, &core);
        let meta = &lb.metadata;
        assert_eq!(meta.name.as_deref(), Some("gluesync-disaster-recovery"));
        assert_eq!(meta.namespace.as_deref(), Some("ns"));
        let labels = meta.labels.clone().unwrap();
        assert_eq!(labels[MANAGED_BY.0], MANAGED_BY.1);
        assert_eq!(labels[PLATFORM_LABEL], "gluesync");
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.name.as_str(), owner.controller),
            ("gluesync", Some(true))
        );
        assert_eq!(meta.annotations.clone().unwrap()["lb"], "internal");
        let ls = lb.spec.unwrap();
        assert_eq!(ls.type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(ls.selector, Some(core.selector.clone()));
        let ports: Vec<_> = ls
            .ports
            .unwrap()
            .into_iter()
            .map(|p| {
                (
                    p.name.unwrap(),
                    p.port,
                    p.target_port,
                    p.protocol,
                    p.node_port,
                )
            })
            .collect();
        assert_eq!(
            ports,
            [
                (
                    "dr-replication".to_string(),
                    1718,
                    Some(IntOrString::Int(1718)),
                    Some("TCP".to_string()),
                    Some(31718)
                ),
                (
                    "dr-control".to_string(),
                    1719,
                    Some(IntOrString::Int(1719)),
                    Some("TCP".to_string()),
                    Some(31719)
                ),
            ]
        );
        assert_eq!(ls.load_balancer_class.as_deref(), Some("cloud"));
        assert_eq!(
            ls.load_balancer_source_ranges,
            Some(vec!["10.0.0.0/8".to_string()])
        );
        assert_eq!(ls.external_traffic_policy.as_deref(), Some("Local"));

        // A NodePort Service keeps the node ports and the traffic policy, not the load balancer's.
        s.service.type_ = ServiceType::NodePort;
        let np = service(&g, &s, &core).spec.unwrap();
        assert_eq!(np.type_.as_deref(), Some("NodePort"));
        assert_eq!(np.ports.unwrap()[1].node_port, Some(31719));
        assert_eq!(np.external_traffic_policy.as_deref(), Some("Local"));
        assert_eq!(
            (np.load_balancer_class, np.load_balancer_source_ranges),
            (None, None)
        );

        // A ClusterIP Service has none of them; no annotations, no annotations map.
        s.service.type_ = ServiceType::ClusterIP;
        s.service.annotations.clear();
        let ip = service(&g, &s, &core);
        assert_eq!(ip.metadata.annotations, None);
        let ip = ip.spec.unwrap();
        assert_eq!(ip.type_.as_deref(), Some("ClusterIP"));
        assert!(ip.ports.unwrap().iter().all(|p| p.node_port.is_none()));
        assert_eq!(
            (
                ip.load_balancer_class,
                ip.load_balancer_source_ranges,
                ip.external_traffic_policy
            ),
            (None, None, None)
        );

        // A load balancer without source ranges leaves them to the cloud.
        s.service.type_ = ServiceType::LoadBalancer;
        s.service.load_balancer_source_ranges.clear();
        assert_eq!(
            service(&g, &s, &core)
                .spec
                .unwrap()
                .load_balancer_source_ranges,
            None
        );
    }

    /// Core Hub gets the setup (the step written before the change is made), passes its stability
    /// check on it, and only then is the Service published; the pair is active once the Service is there.
    #[test]
    fn a_setup_rolls_core_hub_then_publishes_the_service_then_is_active() {
        let (mut g, mark) = wanting();
        let before = [before_setup()];
        let (d, dr) = decide_and_write(&mut g, &before, 0, objects(users(), false));
        let dr = dr.unwrap();
        assert_eq!(dr.phase, Phase::SettingUp);
        assert_eq!(dr.components[0].original, "[]");
        assert!(d.again);
        assert_eq!(
            said(&d, Reason::DisasterRecoveryStarted),
            [(false, dr.message.clone())]
        );
        // The component rolls out: the change is written first, then made.
        let (d, dr) = decide_and_write(&mut g, &before, 1, objects(users(), false));
        assert_eq!(dr.unwrap().components[0].state, State::RollingOut);
        assert!(changes_nothing(&d), "{:?}", d.actions);
        let (d, _) = decide_and_write(&mut g, &before, 2, objects(users(), false));
        let given = patch_of(&d, "core-hub").expect("Core Hub is given the setup");
        assert_eq!(
            given["spec"]["template"]["metadata"]["annotations"][DR_ANNOTATION],
            mark.as_str()
        );
        // On the setup, ready: the stability window runs; no Service before it ends.
        let on_setup = [carrying(&mark, true)];
        let (d, dr) = decide_and_write(&mut g, &on_setup, 3, objects(users(), false));
        let dr = dr.unwrap();
        assert_eq!(dr.components[0].state, State::RollingOut);
        assert!(dr.message.contains("core-hub rolls out"), "{}", dr.message);
        assert!(changes_nothing(&d), "{:?}", d.actions);
        let (d, dr) = decide_and_write(&mut g, &on_setup, 13, objects(users(), false));
        assert_eq!(dr.unwrap().components[0].state, State::Ready);
        assert_eq!(
            said(&d, Reason::DisasterRecoveryWorkloadReady),
            [(
                false,
                "StatefulSet core-hub carries the disaster-recovery setup and passed its stability check"
                    .to_string()
            )]
        );
        assert!(d.again);
        let (d, _) = decide_and_write(&mut g, &on_setup, 13, objects(users(), false));
        let published = services(&d);
        assert_eq!(published.len(), 1, "once every workload is ready");
        assert_eq!(
            published[0].metadata.name.as_deref(),
            Some("gluesync-disaster-recovery")
        );
        let (d, dr) = decide_and_write(&mut g, &on_setup, 14, objects(users(), true));
        let dr = dr.unwrap();
        assert_eq!(dr.phase, Phase::Active);
        assert_eq!(dr.service.as_deref(), Some("gluesync-disaster-recovery"));
        assert_eq!(
            said(&d, Reason::DisasterRecoveryActive),
            [(false, dr.message.clone())]
        );
        assert!(dr.message.contains("ports 1718 and 1719"), "{}", dr.message);
    }

    /// An active pair whose workload lost the setup outside GKO sets it again; a Service gone or whose
    /// settings changed is written again, without touching the workloads; else nothing is done.
    #[test]
    fn an_active_pair_sets_again_what_changed_outside_gko() {
        let (mut g, mark) = wanting();
        let mut c = component(&before_setup());
        c.state = State::Ready;
        let mut status = with_setup(Phase::Active, &mark, c);
        let pair = status.disaster_recovery.as_mut().unwrap();
        pair.service = Some(service_name(&g));
        pair.service_settings = Some(service_digest(&spec()));
        g.status = Some(status.clone());
        let on_setup = [carrying(&mark, true)];
        let d = decide_seeing(&g, &on_setup, 0, objects(users(), true));
        assert!(changes_nothing(&d), "{:?}", d.actions);
        assert_eq!(d.status.disaster_recovery, status.disaster_recovery);

        let d = decide_seeing(&g, &on_setup, 0, objects(users(), false));
        assert_eq!(services(&d).len(), 1, "the Service gone is made again");
        assert_eq!(patched(&d), Vec::<&str>::new());

        let mut changed = spec();
        changed.service.annotations.insert("a".into(), "b".into());
        g.spec.disaster_recovery = Some(changed.clone());
        assert_eq!(setup_mark(&g, &changed), mark, "the pods do not change");
        let d = decide_seeing(&g, &on_setup, 0, objects(users(), true));
        assert_eq!(services(&d).len(), 1, "the new settings are written");
        assert_eq!(patched(&d), Vec::<&str>::new());
        let kept = d.status.disaster_recovery.unwrap();
        assert_eq!(kept.phase, Phase::Active);
        assert_eq!(
            kept.service_settings.as_deref(),
            Some(service_digest(&changed).as_str())
        );

        // Core Hub changed outside GKO (the setup's mark is gone): it is set again.
        g.spec.disaster_recovery = Some(spec());
        let d = decide_seeing(&g, &[before_setup()], 5, objects(users(), true));
        let dr = d.status.disaster_recovery.clone().unwrap();
        assert_eq!(dr.phase, Phase::SettingUp);
        assert_eq!(dr.since, at(5));
        assert_eq!(dr.components[0].state, State::Pending);
        assert_eq!(
            said(&d, Reason::DisasterRecoveryDrift),
            [(
                true,
                "core-hub no longer carry the disaster-recovery setup (changed outside GKO); setting it again"
                    .to_string()
            )]
        );
        assert!(d.again);
    }

    /// A workload that does not come up with the setup within the stability timeout puts the whole setup
    /// back (its pods of the setup that hang are deleted), then the Service and the Secret GKO wrote go,
    /// and the setup ends Failed, where it stays while the spec asks for the same setup.
    #[test]
    fn a_workload_that_does_not_come_up_with_the_setup_puts_everything_back_then_fails() {
        let (mut g, mark) = wanting();
        let mut c = component(&before_setup());
        c.state = State::RollingOut;
        c.changed_at = Some(at(0));
        // A setup asked again over an active pair carries the pair's Service along.
        let mut status = with_setup(Phase::SettingUp, &mark, c);
        let pair = status.disaster_recovery.as_mut().unwrap();
        pair.service = Some(service_name(&g));
        pair.service_settings = Some(service_digest(&spec()));
        g.status = Some(status);
        let stuck = [carrying(&mark, false)];
        let none = DrObjects::default;
        let (_, dr) = decide_and_write(&mut g, &stuck, 59, none());
        assert_eq!(dr.unwrap().phase, Phase::SettingUp, "within the timeout");
        // The fault lands where it claims: the stability check of Core Hub on the setup.
        let (d, dr) = decide_and_write(&mut g, &stuck, 61, none());
        let dr = dr.unwrap();
        let why = dr.components[0].message.clone().unwrap_or_default();
        assert!(why.starts_with("not ready within 60 s"), "{why}");
        let failure = format!("StatefulSet core-hub did not come up with the setup: {why}");
        assert_eq!(dr.failure.as_deref(), Some(failure.as_str()));
        assert_eq!(dr.phase, Phase::RollingBack);
        assert_eq!(
            said(&d, Reason::DisasterRecoveryFailed),
            [(true, format!("{failure}; putting every change back"))]
        );
        // Put back: the change is written first, then made.
        let (d, dr) = decide_and_write(&mut g, &stuck, 62, none());
        let dr = dr.unwrap();
        assert_eq!(dr.components[0].state, State::Restoring);
        assert_eq!(dr.components[0].changed_at, Some(at(62)));
        assert_eq!(
            dr.message,
            format!("the disaster-recovery setup failed ({failure}); putting core-hub back")
        );
        assert!(changes_nothing(&d), "{:?}", d.actions);
        let (d, _) = decide_and_write(&mut g, &stuck, 63, none());
        let restore = patch_of(&d, "core-hub").expect("Core Hub is put back");
        assert!(restore["spec"]["template"]["metadata"]["annotations"][DR_ANNOTATION].is_null());
        // Back as before, its pod of the setup hanging: it is deleted (a StatefulSet waits for it).
        let (d, _) = decide_and_write(&mut g, &[put_back(false, Some(&mark))], 64, none());
        assert_eq!(deleted(&d), ["core-hub-0"]);
        // Up as before: after the stability window, the Service and the Secret GKO wrote go.
        let up = [put_back(true, None)];
        let made = || objects(SecretState::Present { made_by_gko: true }, true);
        let (d, _) = decide_and_write(&mut g, &up, 65, made());
        assert_eq!(removes(&d), Vec::<&Action>::new());
        let (d, dr) = decide_and_write(&mut g, &up, 75, made());
        let dr = dr.unwrap();
        assert_eq!(dr.components[0].state, State::Restored);
        assert_eq!(dr.phase, Phase::RollingBack, "until both are gone");
        assert_eq!(
            removes(&d),
            [
                &Action::RemoveMade(Made::Service, service_name(&g)),
                &Action::RemoveMade(Made::Secret, "s".into())
            ]
        );
        // The Service gone, the Secret emptied (no shared secret, no label): Failed.
        let emptied = || objects(SecretState::NoKey { made_by_gko: false }, false);
        let (d, dr) = decide_and_write(&mut g, &up, 76, emptied());
        assert_eq!(removes(&d), Vec::<&Action>::new());
        let dr = dr.unwrap();
        assert_eq!(dr.phase, Phase::Failed);
        assert!(dr.message.contains(&failure), "{}", dr.message);
        assert!(dr.components.is_empty());
        assert_eq!(
            (dr.service.as_deref(), dr.service_settings.as_deref()),
            (None, None)
        );
        assert_eq!(
            said(&d, Reason::DisasterRecoveryRolledBack),
            [(true, dr.message.clone())]
        );
        // Failed stays while the spec asks for the same setup.
        let d = decide_seeing(&g, &up, 500, emptied());
        assert_eq!(d.status.disaster_recovery, Some(dr));
        assert!(changes_nothing(&d), "{:?}", d.actions);
        assert!(says_nothing_of_the_pair(&d), "{:?}", d.events);
    }

    /// A pod of the setup that crash-loops fails the setup at once, long before the stability timeout;
    /// one still from before the setup (being replaced) does not count against it.
    #[test]
    fn a_pod_of_the_setup_that_crash_loops_fails_it_at_once() {
        let (mut g, mark) = wanting();
        let mut c = component(&before_setup());
        c.state = State::RollingOut;
        c.changed_at = Some(at(0));
        g.status = Some(with_setup(Phase::SettingUp, &mark, c));
        let crashing = |on: Option<&str>| {
            let mut w = carrying(&mark, false);
            w.pods[0].dr_mark = on.map(Into::into);
            w.pods[0].waiting = Some(("CrashLoopBackOff".into(), "back-off 10s".into()));
            w
        };
        let d = decide_seeing(&g, &[crashing(None)], 5, DrObjects::default());
        let dr = d.status.disaster_recovery.clone().unwrap();
        assert_eq!(dr.phase, Phase::SettingUp);
        assert_eq!(dr.components[0].message, None);
        assert!(says_nothing_of_the_pair(&d), "{:?}", d.events);

        let d = decide_seeing(&g, &[crashing(Some(&mark))], 5, DrObjects::default());
        let dr = d.status.disaster_recovery.clone().unwrap();
        let why = "pod core-hub-0 is CrashLoopBackOff: back-off 10s";
        assert_eq!(dr.components[0].message.as_deref(), Some(why));
        assert_eq!(dr.phase, Phase::RollingBack);
        assert_eq!(
            said(&d, Reason::DisasterRecoveryFailed),
            [(
                true,
                format!(
                    "StatefulSet core-hub did not come up with the setup: {why}; putting every change back"
                )
            )]
        );
    }

    /// A workload a setup changes that is gone fails the setup at once.
    #[test]
    fn a_workload_gone_fails_the_setup_at_once() {
        let (mut g, mark) = wanting();
        g.status = Some(with_setup(
            Phase::SettingUp,
            &mark,
            component(&before_setup()),
        ));
        let d = decide_seeing(&g, &[], 0, objects(users(), false));
        let dr = d.status.disaster_recovery.clone().unwrap();
        assert_eq!(
            (dr.phase, dr.failure.as_deref()),
            (Phase::RollingBack, Some("core-hub is gone"))
        );
        assert_eq!(
            said(&d, Reason::DisasterRecoveryFailed),
            [(
                true,
                "core-hub is gone; putting every change back".to_string()
            )]
        );
    }

    /// A teardown puts back Chronos, then Core Hub. Chronos is put back but does not pass its stability
    /// check: that is said, it counts as back (nothing older to go back to), and the teardown goes on to
    /// Core Hub; its new pod not ready yet and its old pod of the setup are not deleted. At the end the
    /// Service goes and a Secret of the user's stays.
    #[test]
    fn a_workload_put_back_that_is_not_stable_is_said_and_the_teardown_goes_on() {
        let (mut g, mark) = wanting();
        g.spec.disaster_recovery = None;
        let mut core = component(&before_setup());
        core.state = State::Ready;
        let mut chronos = component(&as_chronos(before_setup()));
        chronos.state = State::Restoring;
        chronos.changed_at = Some(at(0));
        let mut status = with_setup(Phase::TearingDown, &mark, core);
        let pair = status.disaster_recovery.as_mut().unwrap();
        pair.components.push(chronos);
        g.status = Some(status);
        // Chronos as it was, a new pod not ready yet; an old pod of the setup still ready.
        let mut chronos_back = as_chronos(put_back(false, None));
        chronos_back.pods.push(PodView {
            name: "chronos-1".into(),
            uid: "chronos-1-uid".into(),
            ..as_chronos(carrying(&mark, true)).pods[0].clone()
        });
        let down = [carrying(&mark, true), chronos_back];
        let (d, dr) = decide_and_write(&mut g, &down, 59, objects(users(), true));
        let dr = dr.unwrap();
        let states: Vec<State> = dr.components.iter().map(|c| c.state).collect();
        assert_eq!(states, [State::Ready, State::Restoring]);
        assert_eq!(
            dr.message,
            "taking the disaster-recovery pair down: putting chronos back"
        );
        assert!(changes_nothing(&d), "{:?}", d.actions);
        // The fault lands where it claims: Chronos's stability check, at its timeout.
        let (d, dr) = decide_and_write(&mut g, &down, 61, objects(users(), true));
        let dr = dr.unwrap();
        let why = dr.components[1].message.clone().unwrap_or_default();
        assert!(why.starts_with("not ready within 60 s"), "{why}");
        assert_eq!(
            said(&d, Reason::DisasterRecoveryRestoreNotStable),
            [(
                true,
                format!(
                    "StatefulSet chronos is back as it was before the setup but did not pass its stability check: {why}"
                )
            )]
        );
        let states: Vec<State> = dr.components.iter().map(|c| c.state).collect();
        assert_eq!(
            states,
            [State::Restoring, State::Restored],
            "Core Hub is next"
        );
        // Core Hub put back and up: the Service goes, the user's Secret stays.
        let back = [put_back(true, None), as_chronos(put_back(true, None))];
        decide_and_write(&mut g, &back, 62, objects(users(), true));
        let (d, dr) = decide_and_write(&mut g, &back, 72, objects(users(), true));
        assert_eq!(
            dr.unwrap().phase,
            Phase::TearingDown,
            "until the Service is gone"
        );
        assert_eq!(
            removes(&d),
            [&Action::RemoveMade(Made::Service, service_name(&g))]
        );
        let (d, dr) = decide_and_write(&mut g, &back, 73, objects(users(), false));
        assert_eq!(dr, None);
        assert_eq!(said(&d, Reason::DisasterRecoveryRemoved).len(), 1);
        assert_eq!(removes(&d), Vec::<&Action>::new());
    }

    /// A setup GKO cannot make is refused with why and changes nothing; an active pair asked for
    /// settings it cannot take keeps running as it is; one asked for settings it can take sets up again
    /// from the environment as it was before the first setup.
    #[test]
    fn a_setup_gko_cannot_make_is_refused_and_an_active_pair_keeps_running() {
        let (mut g, mark) = wanting();
        let secret = "Secret gluesync-disaster-recovery";
        let before = [before_setup()];
        let refusals = [
            (
                &before[..],
                SecretState::NotAllowed,
                format!("GKO's installation does not allow it to read {secret}"),
            ),
            (&before, SecretState::Missing, format!("{secret} does not exist")),
            (&before, SecretState::NoKey { made_by_gko: false }, format!("{secret} has no sharedSecret")),
            // As GKO reads a Secret it wrote whose key was taken out by hand (tests/cluster/disaster.rs).
            (&before, SecretState::NoKey { made_by_gko: true }, format!("{secret} has no sharedSecret")),
            (
                &before,
                SecretState::Unreadable("timeout".into()),
                format!("reading {secret}: timeout"),
            ),
            (&before, SecretState::Unknown, format!("{secret} was not read")),
            (
                &[before_setup(), before_setup()],
                users(),
                "a disaster-recovery setup needs exactly one Core Hub workload, and 2 are labelled core-hub"
                    .into(),
            ),
            (
                &[Workload {
                    container: None,
                    ..before_setup()
                }],
                users(),
                "StatefulSet core-hub has no container named by its gluesync.molo17.com/container annotation"
                    .into(),
            ),
        ];
        for (workloads, state, why) in refusals {
            g.status = None;
            let d = decide_seeing(&g, workloads, 0, objects(state, false));
            let dr = d.status.disaster_recovery.clone().unwrap();
            assert_eq!(dr.phase, Phase::Failed, "{why}");
            assert!(
                dr.message
                    .starts_with("the disaster-recovery setup is refused: ")
                    && dr.message.contains(&why),
                "{}",
                dr.message
            );
            assert!(changes_nothing(&d), "{:?}", d.actions);
            assert_eq!(
                said(&d, Reason::DisasterRecoveryRefused),
                [(true, dr.message.clone())]
            );
        }
        // A template with a setup made by hand is refused.
        g.status = None;
        let by_hand = core_hub(json!({"spec": {"containers": [{"name": "c",
            "ports": [{"name": "dr-control", "containerPort": 1719}]}]}}));
        let d = decide_seeing(&g, &[by_hand], 0, objects(users(), false));
        let dr = d.status.disaster_recovery.clone().unwrap();
        assert_eq!(dr.phase, Phase::Failed);
        assert!(
            dr.message.contains("container port 1719 (dr-control)"),
            "{}",
            dr.message
        );
        // Its workload was read whole before the refusal: nothing of it stays in the status.
        assert!(dr.components.is_empty());
        assert!(changes_nothing(&d), "{:?}", d.actions);

        // An active pair (Core Hub had GLUESYNC_DR_ROLE=standby before it) is asked for another peer.
        let before = core_hub(json!({"spec": {"containers": [{"name": "c",
            "env": [{"name": "GLUESYNC_DR_ROLE", "value": "standby"}]}]}}));
        let mut c = component(&before);
        c.state = State::Ready;
        let mut active = with_setup(Phase::Active, &mark, c.clone());
        active.disaster_recovery.as_mut().unwrap().service_settings = Some(service_digest(&spec()));
        let mut other = spec();
        other.peer_address = "elsewhere".into();
        g.spec.disaster_recovery = Some(other.clone());
        let on_setup = [carrying(&mark, true)];
        // Without the Secret the new settings are refused and the pair runs on as it is.
        g.status = Some(active.clone());
        let d = decide_seeing(&g, &on_setup, 0, objects(SecretState::Missing, true));
        let kept = d.status.disaster_recovery.clone().unwrap();
        assert_eq!(
            (kept.phase, kept.setup.as_str()),
            (Phase::Active, mark.as_str())
        );
        assert_eq!(kept.components, vec![c.clone()]);
        assert_eq!(
            kept.message,
            format!("the new disaster-recovery settings are refused: {secret} does not exist")
        );
        assert_eq!(
            said(&d, Reason::DisasterRecoveryRefused),
            [(true, kept.message.clone())]
        );
        assert!(changes_nothing(&d), "{:?}", d.actions);
        // With it, the new setup starts from what Core Hub carried before the first setup.
        let d = decide_seeing(&g, &on_setup, 0, objects(users(), true));
        let next = d.status.disaster_recovery.unwrap();
        assert_eq!(next.phase, Phase::SettingUp);
        assert_eq!(next.setup, setup_mark(&g, &other));
        assert_eq!(next.peer_address, "elsewhere");
        assert_eq!(next.service_settings, Some(service_digest(&spec())));
        assert_eq!(next.components[0].original, c.original);
        assert!(next.components[0].original.contains("standby"));
    }

    /// A setup asked from the Core Hub UI whose Secret GKO wrote, refused (a setup made by hand on Core
    /// Hub), goes with that Secret once no longer wanted; asked again with other settings, it starts
    /// again.
    #[test]
    fn a_refused_setup_goes_with_its_secret_or_starts_again_when_the_spec_changes() {
        let (mut g, _) = wanting();
        let written = || objects(SecretState::Present { made_by_gko: true }, false);
        let by_hand = [core_hub(json!({"spec": {"containers": [{"name": "c",
            "volumeMounts": [{"name": "keys", "mountPath": MOUNT_PATH}]}]}}))];
        let d = decide_seeing(&g, &by_hand, 0, written());
        let failed = d.status.disaster_recovery.clone().unwrap();
        assert_eq!(failed.phase, Phase::Failed);
        assert!(
            failed
                .message
                .contains("already has volume mount keys at /opt/gluesync/disaster-recovery"),
            "{}",
            failed.message
        );
        g.status = Some(d.status);
        // Asked again with other settings, the mount taken out: it starts.
        let mut other = spec();
        other.revision = Some("2".into());
        g.spec.disaster_recovery = Some(other);
        let d = decide_seeing(&g, &[before_setup()], 1, written());
        assert_eq!(d.status.disaster_recovery.unwrap().phase, Phase::SettingUp);
        // No longer wanted: the Secret GKO wrote is emptied, then the setup goes.
        g.spec.disaster_recovery = None;
        // Its key taken out by hand, it still carries GKO's mark: it is emptied all the same.
        for left in [
            written(),
            objects(SecretState::NoKey { made_by_gko: true }, false),
        ] {
            let d = decide_seeing(&g, &by_hand, 1, left);
            assert_eq!(d.status.disaster_recovery, Some(failed.clone()));
            assert_eq!(
                removes(&d),
                [&Action::RemoveMade(
                    Made::Secret,
                    failed.secret_name.clone()
                )]
            );
        }
        let d = decide_seeing(
            &g,
            &by_hand,
            2,
            objects(SecretState::NoKey { made_by_gko: false }, false),
        );
        assert_eq!(d.status.disaster_recovery, None);
    }

    #[test]
    fn a_mount_or_volume_of_the_setups_names_is_a_setup_made_by_hand() {
        let by_name = core_hub(json!({"spec": {"containers": [{"name": "c",
            "volumeMounts": [{"name": VOLUME, "mountPath": "/x"}]}]}}));
        let why = collision(&by_name, "c", &spec()).unwrap();
        assert!(
            why.starts_with(
                "StatefulSet core-hub already has volume mount gluesync-disaster-recovery at /x"
            ),
            "{why}"
        );
        let at_path = core_hub(json!({"spec": {"containers": [{"name": "c",
            "volumeMounts": [{"name": "other", "mountPath": MOUNT_PATH}]}]}}));
        assert!(
            collision(&at_path, "c", &spec())
                .unwrap()
                .contains("volume mount other")
        );
        let volume = core_hub(json!({"spec": {"containers": [{"name": "c"}],
            "volumes": [{"name": VOLUME, "emptyDir": {}}]}}));
        assert!(
            collision(&volume, "c", &spec())
                .unwrap()
                .contains("already has volume gluesync-disaster-recovery,")
        );
        let elsewhere = core_hub(json!({"spec": {"containers": [{"name": "c",
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "emptyDir": {}}]}}));
        assert_eq!(collision(&elsewhere, "c", &spec()), None);
    }

    /// A setup changes Core Hub, then Chronos, one at a time, each found by its name; a teardown puts
    /// back the last changed first; a setup made by hand on Core Hub refuses the whole setup, though
    /// Chronos carries nothing of one.
    #[test]
    fn a_setup_changes_one_workload_at_a_time_and_puts_back_the_last_changed_first() {
        let (mut g, mark) = wanting();
        let present = || objects(users(), false);
        let by_hand = core_hub(json!({"spec": {"containers": [{"name": "c"}],
            "volumes": [{"name": VOLUME, "emptyDir": {}}]}}));
        let d = decide_seeing(&g, &[by_hand, as_chronos(before_setup())], 0, present());
        let refused = d.status.disaster_recovery.unwrap();
        assert_eq!(refused.phase, Phase::Failed);
        assert!(
            refused
                .message
                .contains("StatefulSet core-hub already has volume"),
            "{}",
            refused.message
        );

        let states = |dr: Option<DisasterRecoveryStatus>| -> Vec<State> {
            dr.unwrap().components.iter().map(|c| c.state).collect()
        };
        let both = [before_setup(), as_chronos(before_setup())];
        let (_, dr) = decide_and_write(&mut g, &both, 0, present());
        let dr = dr.unwrap();
        assert!(
            dr.message.ends_with("changing core-hub, chronos"),
            "{}",
            dr.message
        );
        let (_, dr) = decide_and_write(&mut g, &both, 1, present());
        assert_eq!(states(dr), [State::RollingOut, State::Pending]);
        let (d, _) = decide_and_write(&mut g, &both, 2, present());
        assert_eq!(patched(&d), ["core-hub"]);
        let core_on = [carrying(&mark, true), as_chronos(before_setup())];
        decide_and_write(&mut g, &core_on, 3, present());
        let (_, dr) = decide_and_write(&mut g, &core_on, 12, present());
        assert_eq!(states(dr), [State::RollingOut, State::Pending]);
        // Core Hub passed its check: Chronos is next.
        let (_, dr) = decide_and_write(&mut g, &core_on, 13, present());
        assert_eq!(states(dr), [State::Ready, State::RollingOut]);
        let (d, _) = decide_and_write(&mut g, &core_on, 14, present());
        assert_eq!(patched(&d), ["chronos"]);

        // Taken down before Chronos passed its check: Chronos, changed last, is put back first.
        let both_on = [carrying(&mark, true), as_chronos(carrying(&mark, true))];
        g.spec.disaster_recovery = None;
        let (_, dr) = decide_and_write(&mut g, &both_on, 15, present());
        assert_eq!(dr.unwrap().phase, Phase::TearingDown);
        let (_, dr) = decide_and_write(&mut g, &both_on, 16, present());
        assert_eq!(states(dr), [State::Ready, State::Restoring]);
        let (d, _) = decide_and_write(&mut g, &both_on, 17, present());
        assert_eq!(patched(&d), ["chronos"]);
    }

    /// A workload that passed its check and then lost the setup (changed outside GKO) while the next one
    /// rolls out gets the setup again, and passes its check again before the next one is looked at.
    #[test]
    fn a_workload_that_loses_the_setup_while_the_next_rolls_out_gets_it_again() {
        let (mut g, mark) = wanting();
        let present = || objects(users(), false);
        let both = [before_setup(), as_chronos(before_setup())];
        let core_on = [carrying(&mark, true), as_chronos(before_setup())];
        for (t, seen) in [(0, &both), (1, &both), (2, &both)]
            .into_iter()
            .chain([3, 12, 13, 14].map(|t| (t, &core_on)))
        {
            decide_and_write(&mut g, seen, t, present());
        }
        let states = |dr: &DisasterRecoveryStatus| -> Vec<State> {
            dr.components.iter().map(|c| c.state).collect()
        };
        let dr = g
            .status
            .as_ref()
            .unwrap()
            .disaster_recovery
            .clone()
            .unwrap();
        assert_eq!(states(&dr), [State::Ready, State::RollingOut]);

        // Core Hub's template put back by hand while Chronos rolls out with the setup.
        let lost = [before_setup(), as_chronos(carrying(&mark, false))];
        let (d, dr) = decide_and_write(&mut g, &lost, 15, present());
        let dr = dr.unwrap();
        assert_eq!(dr.phase, Phase::SettingUp);
        assert_eq!(states(&dr), [State::RollingOut, State::RollingOut]);
        assert_eq!(dr.components[0].changed_at, Some(at(15)));
        assert!(changes_nothing(&d), "{:?}", d.actions);
        let (d, _) = decide_and_write(&mut g, &lost, 16, present());
        assert_eq!(patched(&d), ["core-hub"]);
        // Core Hub passes its check again before Chronos is looked at: Chronos's window starts after.
        let back = [carrying(&mark, true), as_chronos(carrying(&mark, true))];
        let (_, dr) = decide_and_write(&mut g, &back, 17, present());
        let dr = dr.unwrap();
        assert_eq!(states(&dr), [State::RollingOut, State::RollingOut]);
        assert!(
            dr.components[0].stable.is_some() && dr.components[1].stable.is_none(),
            "{:?}",
            dr.components
        );
        let (_, dr) = decide_and_write(&mut g, &back, 27, present());
        let dr = dr.unwrap();
        assert_eq!(states(&dr), [State::Ready, State::RollingOut]);
        assert_eq!(
            dr.components[1].stable.as_ref().map(|w| &w.since),
            Some(&at(27))
        );
    }

    /// A workload is clean only when nothing of a setup is left on it: any one of the setup's marks
    /// alone is a leftover; the install's own ports, mounts, volumes and environment are not.
    #[test]
    fn anything_a_setup_leaves_keeps_a_workload_from_being_clean() {
        let base = json!({"spec": {"containers": [{"name": "c",
            "env": [{"name": "A", "value": "1"}, {"name": "GLUESYNC_DR_ROLE", "value": "standby"}],
            "ports": [{"name": "http", "containerPort": 8080}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "emptyDir": {}}]}});
        let c = component(&core_hub(base.clone()));
        assert!(c.original.contains("standby"), "{}", c.original);
        assert!(clean(&core_hub(base.clone()), &c));
        /// What a setup may leave behind: its name, and how it is left in a template.
        type Leftover = (&'static str, fn(&mut Value));
        let leftovers: [Leftover; 7] = [
            ("the mark", |t| {
                t["metadata"] = json!({"annotations": {DR_ANNOTATION: "primary-x"}})
            }),
            ("the replication port", |t| {
                t["spec"]["containers"][0]["ports"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "dr-replication", "containerPort": 1718}))
            }),
            ("the control port", |t| {
                t["spec"]["containers"][0]["ports"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "dr-control", "containerPort": 9999}))
            }),
            ("the mount", |t| {
                t["spec"]["containers"][0]["volumeMounts"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": VOLUME, "mountPath": MOUNT_PATH}))
            }),
            ("the volume", |t| {
                t["spec"]["volumes"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": VOLUME, "secret": {"secretName": "s"}}))
            }),
            ("a variable the setup changed", |t| {
                t["spec"]["containers"][0]["env"][1]["value"] = json!("primary")
            }),
            ("a variable the setup added", |t| {
                t["spec"]["containers"][0]["env"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "GLUESYNC_DR_ENABLED", "value": "true"}))
            }),
        ];
        for (what, leave) in leftovers {
            let mut t = base.clone();
            leave(&mut t);
            assert!(!clean(&core_hub(t), &c), "{what} is left");
        }
    }

    /// A setup asked again with another port takes the old port out and leaves the install's own;
    /// putting back takes out only what the setup made, and names only the variables it changed; a
    /// patch carries no empty list (it would replace the workload's).
    #[test]
    fn a_patch_touches_only_what_a_setup_makes() {
        let g = gsp();
        let before = core_hub(json!({"spec": {"containers": [{"name": "c",
            "ports": [{"name": "http", "containerPort": 8080}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "emptyDir": {}}]}}));
        let c = component(&before);
        let set = core_hub(json!({
            "metadata": {"annotations": {DR_ANNOTATION: "primary-x"}},
            "spec": {"containers": [{"name": "c",
                "env": [{"name": "GLUESYNC_DR_ENABLED", "value": "true"}],
                "ports": [{"name": "http", "containerPort": 8080},
                          {"name": "dr-replication", "containerPort": 1718},
                          {"name": "dr-control", "containerPort": 1719}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                 {"name": VOLUME, "mountPath": MOUNT_PATH}]}],
                "volumes": [{"name": "data", "emptyDir": {}},
                            {"name": VOLUME, "secret": {"secretName": "s"}}]}}));
        let mut moved = spec();
        moved.replication_port = 2718;
        let again = patch(&g, &set, &c, Some((&moved, "primary-y")));
        let ports = again["spec"]["template"]["spec"]["containers"][0]["ports"]
            .as_array()
            .unwrap();
        let deleted: Vec<&Value> = ports
            .iter()
            .filter(|p| p["$patch"] == "delete")
            .map(|p| &p["containerPort"])
            .collect();
        assert_eq!(deleted, [&json!(1718)], "{ports:?}");
        let given: Vec<(&Value, &Value)> = ports
            .iter()
            .filter(|p| p.get("$patch").is_none())
            .map(|p| (&p["name"], &p["containerPort"]))
            .collect();
        assert_eq!(
            given,
            [
                (&json!("dr-replication"), &json!(2718)),
                (&json!("dr-control"), &json!(1719))
            ]
        );

        let back = patch(&g, &set, &c, None);
        assert_eq!(
            back["spec"]["template"]["spec"],
            json!({
                "containers": [{"name": "c",
                    "env": [{"name": "GLUESYNC_DR_ENABLED", "$patch": "delete"}],
                    "ports": [{"containerPort": 1718, "$patch": "delete"},
                              {"containerPort": 1719, "$patch": "delete"}],
                    "volumeMounts": [{"mountPath": MOUNT_PATH, "$patch": "delete"}]}],
                "volumes": [{"name": VOLUME, "$patch": "delete"}]})
        );
        let only_env = patch(&g, &left_by_setup(), &component(&before_setup()), None);
        assert_eq!(
            only_env["spec"]["template"]["spec"],
            json!({"containers": [{"name": "c",
                "env": [{"name": "GLUESYNC_DR_ENABLED", "$patch": "delete"}]}]})
        );
    }
}
