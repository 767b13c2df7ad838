//! What a setup writes: the strategic merge patch of a workload's pod template (the environment, the
//! ports, the Secret's volume and mount, computed from what the workload carries now), what putting it
//! back leaves, and the pair's Service.

use serde_json::{Value, json};

use super::*;

pub(super) fn containers(w: &Workload) -> &[k8s_openapi::api::core::v1::Container] {
    w.template
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
}

pub(super) fn container<'a>(
    w: &'a Workload,
    name: &str,
) -> Option<&'a k8s_openapi::api::core::v1::Container> {
    containers(w).iter().find(|c| c.name == name)
}

pub(super) fn volumes(w: &Workload) -> &[k8s_openapi::api::core::v1::Volume] {
    w.template
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default()
}

/// The environment entries with the setup's names that `w`'s container carries now, as JSON.
pub(super) fn env_now(w: &Workload, name: &str) -> Vec<Value> {
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
pub(super) fn collision(w: &Workload, cname: &str, spec: &DisasterRecoverySpec) -> Option<String> {
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
pub(super) fn patch(
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
                    Some(_) if crate::update::mutated(crate::update::Mutant::RestoreForgets) => {
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
pub(super) fn strip_empty(v: &mut Value) {
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
pub(super) fn clean(w: &Workload, c: &DisasterRecoveryComponent) -> bool {
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
pub(super) fn service(
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
pub(super) fn service_digest(spec: &DisasterRecoverySpec) -> String {
    let text = serde_json::to_string(&spec.service).unwrap_or_default();
    crate::api::ids::digest(&[text])
}
