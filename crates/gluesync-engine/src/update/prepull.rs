//! The pre-pull: before anything is paused, the new Core Hub and agent images are pulled on the nodes
//! that run their pods now, so that the pipelines' pause does not wait for a registry.
//!
//! One short-lived pod per node and image (`<platform>-pre-pull-<digest>`, labelled
//! `gluesync.molo17.com/pre-pull: <platform>`, owned by the GluesyncPlatform) is bound to its node by
//! `nodeName`, runs the new image with the workload's pull secrets, ServiceAccount and pull policy, and a
//! command that exits at once (`true`; an image without it still counts: its container was created, so
//! the image is on the node). The step `PrePull` waits until every pod's image is on its node, then goes
//! on to the gates (approval, windows) and the drain. A pull that fails (ErrImagePull,
//! ImagePullBackOff, InvalidImageName...) or does not end within `prePull.timeoutSeconds`, and a pod the
//! API server refuses to create, refuse the update with nothing paused or changed. The pods go once the
//! pipelines run again (see `decide_now`), whatever ended the step; a GKO that takes over once the update
//! has ended deletes any left behind, one that begins the update again takes them in, and PrePull deletes
//! a pod its plan does not want (the GluesyncPlatform's deletion takes them with it, through their owner).
//! A pod is made only once a written status lists it (`status.update.prePulls`: GKO's admission policies
//! let its token create no other); only pods labelled for this platform and owned by it are GKO's, taken
//! in or deleted.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{
        Capabilities, Container, Pod, PodSecurityContext, PodSpec, ResourceRequirements,
        SeccompProfile, SecurityContext, Toleration,
    },
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::ObjectMeta},
};
use kube::{Resource, ResourceExt};

use super::{Action, Decision, Observed, move_to};
use crate::{
    api::{
        GluesyncPlatform, PRE_PULL_LABEL, PrePullEntry, Reason, UpdateStatus, UpdateStep,
        ids::digest,
    },
    update::observed::{PrePullPod, PullState, Workload},
};

/// One image to pull on one node.
#[derive(Clone, Debug, PartialEq)]
pub struct Pull {
    /// The pod's name.
    pub name: String,
    pub node: String,
    pub image: String,
    /// The workload whose pods run on that node.
    pub workload: String,
}

/// The pulls an update needs: each new Core Hub and agent image, on each node that runs a pod of its
/// workload now (pods not yet scheduled have no node, and need none).
pub fn wanted(gsp: &GluesyncPlatform, u: &UpdateStatus, workloads: &[Workload]) -> Vec<Pull> {
    let platform = gsp.name_any();
    let mut pulls: BTreeMap<String, Pull> = BTreeMap::new();
    for c in &u.components {
        let (Some(image), true) = (&c.to_image, super::rollout::is_core(c)) else {
            continue;
        };
        let Some(w) = workloads.iter().find(|w| w.name == c.name) else {
            continue;
        };
        for node in w.pods.iter().filter_map(|p| p.node.as_ref()) {
            let name = pod_name(&platform, node, image);
            pulls.entry(name.clone()).or_insert_with(|| Pull {
                name,
                node: node.clone(),
                image: image.clone(),
                workload: w.name.clone(),
            });
        }
    }
    pulls.into_values().collect()
}

/// `<platform>-pre-pull-<digest of node and image>`: the same pull has the same name after a restart.
fn pod_name(platform: &str, node: &str, image: &str) -> String {
    let d = digest(&[node, image]);
    // A pod name is a DNS subdomain (253 characters); a GluesyncPlatform's name leaves room.
    format!("{platform}-pre-pull-{}", &d[..12])
}

/// This platform's pre-pull pods, as observed: labelled for it and controlled by it (made by GKO for
/// it). A pod that carries the label but not the owner reference is someone else's: GKO neither takes
/// it in nor deletes it.
fn observed<'a>(gsp: &GluesyncPlatform, obs: &'a Observed) -> impl Iterator<Item = &'a PrePullPod> {
    let platform = gsp.name_any();
    let uid = gsp.uid();
    obs.pre_pulls
        .iter()
        .filter(move |p| p.platform == platform && p.owner.is_some() && p.owner == uid)
}

/// Does this update pull first? Only when Core Hub (or an agent) changes and `prePull.enabled`.
fn wanted_for(gsp: &GluesyncPlatform, u: &UpdateStatus, next: UpdateStep) -> bool {
    next == UpdateStep::Drain && gsp.spec.pre_pull.enabled && super::rollout::core_hub_changes(u)
}

/// What Snapshot moves to: `PrePull` when the update pulls first (and there is something to pull),
/// else the gates and then `next`.
pub(super) fn after_snapshot(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    u: &mut UpdateStatus,
    next: UpdateStep,
    d: &mut Decision,
) {
    let now = &obs.now;
    let pulls = if wanted_for(gsp, u, next) {
        wanted(gsp, u, obs.workloads)
    } else {
        vec![]
    };
    if pulls.is_empty() {
        return super::gate::after_snapshot(gsp, u, next, now, d);
    }
    u.pre_pulls = entries(&pulls);
    d.status.message = Some(pulling(&pulls));
    move_to(gsp, u, UpdateStep::PrePull, now, d);
}

/// The pulls as the status lists them (what the admission policy lets GKO create).
fn entries(pulls: &[Pull]) -> Vec<PrePullEntry> {
    pulls
        .iter()
        .map(|p| PrePullEntry {
            pod: p.name.clone(),
            node: p.node.clone(),
            image: p.image.clone(),
        })
        .collect()
}

/// The status message while `pulls` are under way.
fn pulling(pulls: &[Pull]) -> String {
    format!(
        "pulling the new images on the nodes before any pipeline is paused: {}",
        describe(pulls)
    )
}

/// "image on node, ..." for a message.
fn describe(pulls: &[Pull]) -> String {
    let mut by_image: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for p in pulls {
        by_image.entry(&p.image).or_default().push(&p.node);
    }
    by_image
        .iter()
        .map(|(image, nodes)| format!("{image} on {}", nodes.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The step `PrePull`: every pull's pod is made; once each image is on its node the update goes on to
/// its gates and its drain; a failed, refused or late pull refuses it, nothing paused.
pub(super) fn pre_pull(
    gsp: &GluesyncPlatform,
    obs: &Observed,
    u: &mut UpdateStatus,
    d: &mut Decision,
) {
    let now = &obs.now;
    if super::gate::replanned(gsp, obs, u, d) {
        return;
    }
    let pulls = if gsp.spec.pre_pull.enabled {
        wanted(gsp, u, obs.workloads)
    } else {
        vec![]
    };
    // The pods are made once the status lists them: the decision that makes one writes it first.
    u.pre_pulls = entries(&pulls);
    let seen: BTreeMap<&str, &PrePullPod> =
        observed(gsp, obs).map(|p| (p.name.as_str(), p)).collect();
    // A pod this plan does not want (one of a plan given up before its status was written, or for a
    // node its workload left) pulls nothing the update needs: it goes.
    for (name, p) in &seen {
        if !matches!(p.state, PullState::Refused(..)) && !pulls.iter().any(|w| w.name == *name) {
            d.actions.push(Action::DeletePrePull(name.to_string()));
        }
    }
    let since = u.step.since().clone();
    let mut pending = vec![];
    for pull in &pulls {
        match seen.get(pull.name.as_str()).map(|p| &p.state) {
            Some(PullState::Pulled) => {}
            Some(PullState::Failed(reason, message)) => {
                return super::refuse(
                    gsp,
                    u,
                    d,
                    now,
                    untouched(format!(
                        "the image {} could not be pulled on node {} ({reason}: {message})",
                        pull.image, pull.node
                    )),
                );
            }
            Some(PullState::Refused(at, message)) if at.0 >= since.0 => {
                return super::refuse(
                    gsp,
                    u,
                    d,
                    now,
                    untouched(format!(
                        "Kubernetes refused the pod that pulls {} on node {}: {message}",
                        pull.image, pull.node
                    )),
                );
            }
            Some(PullState::Pulling) => pending.push(pull.clone()),
            // Not made yet (or refused before this step began): made now.
            Some(PullState::Refused(..)) | None => {
                d.actions
                    .push(Action::CreatePod(Box::new(pod(gsp, pull, obs.workloads))));
                pending.push(pull.clone());
            }
        }
    }
    if pending.is_empty() || super::mutated(super::Mutant::DrainBeforePulled) {
        let seconds = super::millis(&since, now) / 1000;
        if !pulls.is_empty() {
            d.event(
                false,
                Reason::ImagesPrePulled,
                format!(
                    "pulled before any pipeline is paused, in {seconds} s: {}",
                    describe(&pulls)
                ),
            );
        }
        d.status.message = Some("putting running pipelines into maintenance mode".into());
        return super::gate::after_snapshot(gsp, u, UpdateStep::Drain, now, d);
    }
    let deadline = u.step.deadline().cloned().unwrap_or_else(|| now.clone());
    if super::passed(&deadline, now) {
        return super::refuse(
            gsp,
            u,
            d,
            now,
            untouched(format!(
                "the new images were not pulled within {} s (prePull.timeoutSeconds): {}",
                gsp.spec.pre_pull.timeout_seconds,
                describe(&pending)
            )),
        );
    }
    d.status.message = Some(pulling(&pending));
    d.requeue_at(&deadline, now);
}

/// A refusal from PrePull says that nothing was paused or changed yet.
fn untouched(why: String) -> String {
    format!("{why}; nothing was paused or changed")
}

/// Unless `keep` (the pre-pull runs, or the pipelines are paused), this platform's pre-pull pods are
/// deleted (a GKO that stopped before their deletion leaves them to the next decision).
pub(super) fn clean(gsp: &GluesyncPlatform, obs: &Observed, keep: bool, d: &mut Decision) {
    if keep {
        return;
    }
    for p in observed(gsp, obs).filter(|p| !matches!(p.state, PullState::Refused(..))) {
        d.actions.push(Action::DeletePrePull(p.name.clone()));
    }
}

/// The pod that pulls `pull.image` on `pull.node`: bound to the node, with the workload's pull secrets,
/// ServiceAccount (no token mounted) and pull policy, tolerating the node's taints, as small as a pod
/// can be, and within the Pod Security Standard "restricted".
pub fn pod(gsp: &GluesyncPlatform, pull: &Pull, workloads: &[Workload]) -> Pod {
    let w = workloads.iter().find(|w| w.name == pull.workload);
    let template = w.and_then(|w| w.template.spec.as_ref());
    let policy = w
        .and_then(|w| w.container.as_ref())
        .and_then(|name| template?.containers.iter().find(|c| &c.name == name))
        .and_then(|c| c.image_pull_policy.clone());
    let quantity = |s: &str| Quantity(s.to_string());
    let resources = |cpu: &str, memory: &str| {
        BTreeMap::from([
            ("cpu".to_string(), quantity(cpu)),
            ("memory".to_string(), quantity(memory)),
        ])
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(pull.name.clone()),
            namespace: gsp.namespace(),
            labels: Some(BTreeMap::from([
                (PRE_PULL_LABEL.to_string(), gsp.name_any()),
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    "gluesync-operator".to_string(),
                ),
                (
                    "app.kubernetes.io/component".to_string(),
                    "pre-pull".to_string(),
                ),
            ])),
            annotations: Some(BTreeMap::from([(
                "gluesync.molo17.com/pulls-for".to_string(),
                pull.workload.clone(),
            )])),
            owner_references: gsp.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(pull.node.clone()),
            restart_policy: Some("Never".into()),
            service_account_name: template.and_then(|t| t.service_account_name.clone()),
            automount_service_account_token: Some(false),
            image_pull_secrets: template.and_then(|t| t.image_pull_secrets.clone()),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(1),
            tolerations: Some(vec![Toleration {
                operator: Some("Exists".into()),
                ..Toleration::default()
            }]),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(65532),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    ..SeccompProfile::default()
                }),
                ..PodSecurityContext::default()
            }),
            containers: vec![Container {
                name: "pull".into(),
                image: Some(pull.image.clone()),
                image_pull_policy: policy,
                command: Some(vec!["true".into()]),
                resources: Some(ResourceRequirements {
                    requests: Some(resources("10m", "16Mi")),
                    limits: Some(resources("100m", "64Mi")),
                    ..ResourceRequirements::default()
                }),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    read_only_root_filesystem: Some(true),
                    capabilities: Some(Capabilities {
                        drop: Some(vec!["ALL".into()]),
                        ..Capabilities::default()
                    }),
                    ..SecurityContext::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// A pre-pull pod's state, from what its container and phase say.
pub fn state_of(pod: &Pod) -> PullState {
    const FAILED: [&str; 6] = [
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "RegistryUnavailable",
        "SignatureValidationFailed",
    ];
    let status = pod.status.clone().unwrap_or_default();
    let container = status
        .container_statuses
        .unwrap_or_default()
        .into_iter()
        .next();
    if let Some(c) = container {
        if !c.image_id.is_empty() {
            return PullState::Pulled;
        }
        let state = c.state.unwrap_or_default();
        if state.running.is_some() || state.terminated.is_some() {
            return PullState::Pulled;
        }
        if let Some(w) = state.waiting {
            let reason = w.reason.unwrap_or_default();
            if FAILED.contains(&reason.as_str()) {
                return PullState::Failed(reason, w.message.unwrap_or_default());
            }
            // Past the pull: the container could not be made or started from the image, or it ran and
            // waits to run again.
            if matches!(
                reason.as_str(),
                "CreateContainerError"
                    | "CreateContainerConfigError"
                    | "RunContainerError"
                    | "CrashLoopBackOff"
            ) {
                return PullState::Pulled;
            }
        }
    }
    match status.phase.as_deref() {
        // Its container started: the image is on the node.
        Some("Succeeded" | "Running") => PullState::Pulled,
        // The kubelet did not admit it (no room on the node, a node selector it does not match...).
        Some("Failed") => PullState::Failed(
            status.reason.unwrap_or_else(|| "Failed".into()),
            status.message.unwrap_or_default(),
        ),
        _ => PullState::Pulling,
    }
}

/// The observed pre-pull pod of a pod labelled `gluesync.molo17.com/pre-pull` (none once it is being
/// deleted: it is as good as gone).
pub fn observe(pod: &Pod) -> Option<PrePullPod> {
    if pod.meta().deletion_timestamp.is_some() {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    Some(PrePullPod {
        name: pod.name_any(),
        platform: pod.labels().get(PRE_PULL_LABEL)?.clone(),
        owner: pod
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true) && o.kind == GluesyncPlatform::kind(&()))
            .map(|o| o.uid.clone()),
        node: spec.node_name.clone().unwrap_or_default(),
        image: spec.containers.first()?.image.clone().unwrap_or_default(),
        state: state_of(pod),
    })
}
