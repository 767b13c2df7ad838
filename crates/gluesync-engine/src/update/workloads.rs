//! The cluster's objects as the engine reads them: the labelled StatefulSets and Deployments of the
//! namespace become [`Workload`]s, a pure projection that the rest of GKO works on, each with the pods it
//! owns (the operator's watches hand them over; its writer makes the changes the engine decides).
//!
//! A workload's pods are found through their owners, not through its label selector: selectors may use
//! `matchExpressions` and may overlap between workloads, owners do neither. See [`owner_of`].

use k8s_openapi::{
    api::{
        apps::v1::{Deployment, StatefulSet},
        core::v1::{Pod, PodTemplateSpec},
    },
    apimachinery::pkg::apis::meta::v1::OwnerReference,
};
use kube::ResourceExt;

use crate::{
    api::{CONTAINER_ANNOTATION, ComponentType, TYPE_LABEL, WorkloadKind},
    update::observed::{PodView, Workload},
};

/// The label the Deployment controller puts on a ReplicaSet's pods: the hash its name ends in.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";

impl PodView {
    pub fn from_pod(pod: &Pod, container: &str) -> Option<PodView> {
        let spec = pod.spec.as_ref()?;
        let image = spec
            .containers
            .iter()
            .find(|c| c.name == container)?
            .image
            .clone()
            .unwrap_or_default();
        let status = pod.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let cs = status
            .container_statuses
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.name == container);
        let waiting = cs
            .as_ref()
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.waiting.as_ref())
            .map(|w| {
                (
                    w.reason.clone().unwrap_or_default(),
                    w.message.clone().unwrap_or_default(),
                )
            });
        Some(PodView {
            name: pod.name_any(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            image,
            ready,
            waiting,
            restarts: cs.map_or(0, |c| c.restart_count),
            node: spec.node_name.clone(),
            dr_mark: pod.annotations().get(crate::api::DR_ANNOTATION).cloned(),
        })
    }
}

/// The pod's controller: the ownerReference with `controller: true`.
fn controller_of(pod: &Pod) -> Option<&OwnerReference> {
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
}

/// The workload that owns a pod: its kind and name, read from the pod alone.
///
/// - A StatefulSet owns its pods itself: their controller ownerReference is of kind `StatefulSet` and
///   carries its name (and uid, which [`Workload::owns`] checks too).
/// - A Deployment owns its pods through a ReplicaSet: their controller ownerReference is of kind
///   `ReplicaSet`. The Deployment controller names each of its ReplicaSets `<deployment name>-<hash>` and
///   labels the ReplicaSet's pods `pod-template-hash: <hash>`, so the Deployment's name is the
///   ReplicaSet's name with `-<hash>` cut off. Reading it that way spares GKO a watch on ReplicaSets. The
///   ReplicaSet's own owner (the Deployment's uid) is not visible from the pod, so for a Deployment the
///   name is all that is checked.
///
/// `None` for a pod with no controller, one owned by anything else (a Job, a DaemonSet, a bare pod), or
/// by a ReplicaSet that does not follow the rule above (one made by hand).
pub fn owner_of(pod: &Pod) -> Option<(WorkloadKind, String)> {
    let owner = controller_of(pod)?;
    if !owner.api_version.starts_with("apps/") {
        return None;
    }
    match owner.kind.as_str() {
        "StatefulSet" => Some((WorkloadKind::StatefulSet, owner.name.clone())),
        "ReplicaSet" => {
            let hash = pod.labels().get(POD_TEMPLATE_HASH_LABEL)?;
            let deployment = owner.name.strip_suffix(hash.as_str())?.strip_suffix('-')?;
            (!hash.is_empty() && !deployment.is_empty())
                .then(|| (WorkloadKind::Deployment, deployment.to_string()))
        }
        _ => None,
    }
}

impl Workload {
    pub fn from_statefulset(sts: &StatefulSet) -> Option<Workload> {
        let label_value = sts.labels().get(TYPE_LABEL)?.clone();
        let spec = sts.spec.as_ref()?;
        let status = sts.status.clone().unwrap_or_default();
        let replicas = spec.replicas.unwrap_or(1);
        let seen = status.observed_generation.unwrap_or(0) >= sts.metadata.generation.unwrap_or(0);
        let rolled =
            status.update_revision.is_none() || status.current_revision == status.update_revision;
        let ready = seen
            && rolled
            && status.replicas == replicas
            && status.ready_replicas.unwrap_or(0) == replicas
            && status.updated_replicas.unwrap_or(0) == replicas;
        let mut w = Self::new(
            WorkloadKind::StatefulSet,
            sts.name_any(),
            sts.metadata.uid.clone().unwrap_or_default(),
            label_value,
            sts.annotations()
                .get(CONTAINER_ANNOTATION)
                .map(String::as_str),
            &spec.template,
            ready,
        );
        w.selector = spec.selector.match_labels.clone().unwrap_or_default();
        let strategy = spec.update_strategy.as_ref();
        let partition = strategy
            .and_then(|s| s.rolling_update.as_ref())
            .and_then(|r| r.partition)
            .unwrap_or(0);
        w.rollout_blocker = if strategy.and_then(|s| s.type_.as_deref()) == Some("OnDelete") {
            Some(format!(
                "StatefulSet {} has updateStrategy OnDelete: its pods never take a new image by \
                 themselves; GKO needs RollingUpdate",
                w.name
            ))
        } else if partition > 0 {
            Some(format!(
                "StatefulSet {} has rollingUpdate.partition {partition}: pods below ordinal \
                 {partition} keep the old image; GKO needs partition 0",
                w.name
            ))
        } else {
            None
        };
        Some(w)
    }

    pub fn from_deployment(deploy: &Deployment) -> Option<Workload> {
        let label_value = deploy.labels().get(TYPE_LABEL)?.clone();
        let spec = deploy.spec.as_ref()?;
        let status = deploy.status.clone().unwrap_or_default();
        let replicas = spec.replicas.unwrap_or(1);
        let seen =
            status.observed_generation.unwrap_or(0) >= deploy.metadata.generation.unwrap_or(0);
        let ready = seen
            && status.replicas.unwrap_or(0) == replicas
            && status.updated_replicas.unwrap_or(0) == replicas
            && status.ready_replicas.unwrap_or(0) == replicas
            && status.available_replicas.unwrap_or(0) == replicas;
        let mut w = Self::new(
            WorkloadKind::Deployment,
            deploy.name_any(),
            deploy.metadata.uid.clone().unwrap_or_default(),
            label_value,
            deploy
                .annotations()
                .get(CONTAINER_ANNOTATION)
                .map(String::as_str),
            &spec.template,
            ready,
        );
        w.selector = spec.selector.match_labels.clone().unwrap_or_default();
        // The conditions describe the generation the controller last saw: until it has seen the current
        // one, a ProgressDeadlineExceeded is the verdict on an earlier rollout.
        let current = status.observed_generation == deploy.metadata.generation;
        w.progress_deadline_exceeded = current
            && status.conditions.unwrap_or_default().iter().any(|c| {
                c.type_ == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
            });
        w.self_update_mark = deploy
            .annotations()
            .get(crate::api::SELF_UPDATE_ANNOTATION)
            .cloned();
        if spec.paused == Some(true) {
            w.rollout_blocker = Some(format!(
                "Deployment {} is paused (spec.paused: true): it rolls out no new image until it is \
                 resumed; GKO needs it unpaused",
                w.name
            ));
        }
        Some(w)
    }

    fn new(
        kind: WorkloadKind,
        name: String,
        uid: String,
        label_value: String,
        container_annotation: Option<&str>,
        template: &PodTemplateSpec,
        ready: bool,
    ) -> Workload {
        let containers = template
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or_default();
        let container = match container_annotation {
            Some(wanted) => containers.iter().find(|c| c.name == wanted),
            None => containers.first(),
        };
        Workload {
            kind,
            name,
            uid,
            component_type: ComponentType::from_label(&label_value),
            label_value,
            container: container.map(|c| c.name.clone()),
            image: container.and_then(|c| c.image.clone()).unwrap_or_default(),
            ready,
            progress_deadline_exceeded: false,
            rollout_blocker: None,
            pods: Vec::new(),
            self_update_mark: None,
            template: Box::new(template.clone()),
            selector: Default::default(),
        }
    }

    /// The pod is this workload's: [`owner_of`] names its kind and name and, for a StatefulSet, the
    /// ownerReference carries its uid (a pod left from a deleted StatefulSet of the same name is not).
    pub fn owns(&self, pod: &Pod) -> bool {
        if owner_of(pod).is_none_or(|(kind, name)| kind != self.kind || name != self.name) {
            return false;
        }
        match self.kind {
            WorkloadKind::StatefulSet => controller_of(pod).is_some_and(|o| o.uid == self.uid),
            WorkloadKind::Deployment => true,
        }
    }

    /// Takes in the pods it owns (see [`Workload::owns`]) out of the given ones.
    pub fn attach_pods<'a>(&mut self, pods: impl IntoIterator<Item = &'a Pod>) {
        let Some(container) = self.container.clone() else {
            return;
        };
        self.pods = pods
            .into_iter()
            .filter(|p| self.owns(p))
            .filter_map(|p| PodView::from_pod(p, &container))
            .collect();
        self.pods.sort_by(|a, b| a.name.cmp(&b.name));
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::{
        apps::v1::{
            DeploymentCondition, DeploymentSpec, DeploymentStatus,
            RollingUpdateStatefulSetStrategy, StatefulSetSpec, StatefulSetStatus,
            StatefulSetUpdateStrategy,
        },
        core::v1::{Container, ContainerStatus, PodCondition, PodSpec, PodStatus},
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    use kube::core::ObjectMeta;

    use super::*;

    fn sts(containers: &[(&str, &str)], annotation: Option<&str>) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                name: Some("gluesync-gluesync-core-hub".into()),
                uid: Some("sts-uid".into()),
                generation: Some(2),
                labels: Some([(TYPE_LABEL.to_string(), "core-hub".to_string())].into()),
                annotations: annotation
                    .map(|a| [(CONTAINER_ANNOTATION.to_string(), a.to_string())].into()),
                ..Default::default()
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(2),
                template: PodTemplateSpec {
                    spec: Some(PodSpec {
                        containers: containers
                            .iter()
                            .map(|(n, i)| Container {
                                name: n.to_string(),
                                image: Some(i.to_string()),
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            }),
            status: Some(StatefulSetStatus {
                observed_generation: Some(2),
                replicas: 2,
                ready_replicas: Some(2),
                updated_replicas: Some(2),
                current_revision: Some("r2".into()),
                update_revision: Some("r2".into()),
                ..Default::default()
            }),
        }
    }

    /// A labelled StatefulSet `name` (uid `<name>-uid`, one container "c") with the given selector.
    fn sts_named(name: &str, selector: LabelSelector) -> StatefulSet {
        let mut s = sts(&[("c", "x:1")], None);
        s.metadata.name = Some(name.into());
        s.metadata.uid = Some(format!("{name}-uid"));
        s.spec.as_mut().unwrap().selector = selector;
        s
    }

    fn deployment(name: &str) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("{name}-uid")),
                generation: Some(4),
                labels: Some([(TYPE_LABEL.to_string(), "module".to_string())].into()),
                ..Default::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(1),
                selector: LabelSelector {
                    match_labels: Some([("app".to_string(), "shared".to_string())].into()),
                    ..Default::default()
                },
                template: PodTemplateSpec {
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "c".into(),
                            image: Some("molo17/gluesync-chronos:0.3.2".into()),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            }),
            status: Some(DeploymentStatus {
                observed_generation: Some(4),
                replicas: Some(1),
                updated_replicas: Some(1),
                ready_replicas: Some(1),
                available_replicas: Some(1),
                ..Default::default()
            }),
        }
    }

    fn owner(kind: &str, name: &str, uid: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(controller),
            ..Default::default()
        }
    }

    /// A pod labelled `app: shared` (and the given labels), with one container "c" and the given owners.
    fn pod(name: &str, owners: Vec<OwnerReference>, labels: &[(&str, &str)]) -> Pod {
        let mut all: std::collections::BTreeMap<String, String> =
            [("app".to_string(), "shared".to_string())].into();
        all.extend(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("{name}-uid")),
                labels: Some(all),
                owner_references: Some(owners),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("x:1".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        }
    }

    fn sts_pod(sts: &str, ordinal: u32) -> Pod {
        pod(
            &format!("{sts}-{ordinal}"),
            vec![owner("StatefulSet", sts, &format!("{sts}-uid"), true)],
            &[],
        )
    }

    fn rs_pod(rs: &str, hash: &str, suffix: &str) -> Pod {
        pod(
            &format!("{rs}-{suffix}"),
            vec![owner("ReplicaSet", rs, &format!("{rs}-uid"), true)],
            &[(POD_TEMPLATE_HASH_LABEL, hash)],
        )
    }

    fn names(w: &Workload) -> Vec<&str> {
        w.pods.iter().map(|p| p.name.as_str()).collect()
    }

    fn shared() -> LabelSelector {
        LabelSelector {
            match_labels: Some([("app".to_string(), "shared".to_string())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_first_container_or_the_annotated_one() {
        let two = [
            ("sidecar", "envoy:1.0"),
            ("core-hub", "molo17/gluesync-core-hub:2.3.2.1"),
        ];
        let w = Workload::from_statefulset(&sts(&two, None)).unwrap();
        assert_eq!(w.container.as_deref(), Some("sidecar"));
        assert_eq!(w.uid, "sts-uid");
        let w = Workload::from_statefulset(&sts(&two, Some("core-hub"))).unwrap();
        assert_eq!(w.container.as_deref(), Some("core-hub"));
        assert_eq!(w.version().as_deref(), Some("2.3.2.1"));
        assert_eq!(w.component_type, Some(ComponentType::CoreHub));
        let w = Workload::from_statefulset(&sts(&two, Some("missing"))).unwrap();
        assert_eq!(w.container, None);
        assert_eq!(w.image, "");
    }

    #[test]
    fn ready_only_when_rolled_out() {
        let one = [("c", "molo17/gluesync-core-hub:2.3.2.1")];
        assert!(Workload::from_statefulset(&sts(&one, None)).unwrap().ready);

        let mut s = sts(&one, None);
        s.metadata.generation = Some(3);
        assert!(
            !Workload::from_statefulset(&s).unwrap().ready,
            "spec not seen"
        );

        let mut s = sts(&one, None);
        s.status.as_mut().unwrap().update_revision = Some("r3".into());
        assert!(
            !Workload::from_statefulset(&s).unwrap().ready,
            "revision rolling"
        );

        let mut s = sts(&one, None);
        s.status.as_mut().unwrap().ready_replicas = Some(1);
        assert!(
            !Workload::from_statefulset(&s).unwrap().ready,
            "replica not ready"
        );

        let mut s = sts(&one, None);
        s.status.as_mut().unwrap().updated_replicas = Some(1);
        assert!(
            !Workload::from_statefulset(&s).unwrap().ready,
            "replica not updated"
        );
    }

    #[test]
    fn unlabelled_workloads_are_not_managed() {
        let mut s = sts(&[("c", "x:1")], None);
        s.metadata.labels = None;
        assert!(Workload::from_statefulset(&s).is_none());
    }

    #[test]
    fn owner_of_reads_the_controller_reference() {
        assert_eq!(
            owner_of(&sts_pod("db", 0)),
            Some((WorkloadKind::StatefulSet, "db".to_string()))
        );
        assert_eq!(
            owner_of(&rs_pod("web-5d4f8b9c7", "5d4f8b9c7", "x2k9p")),
            Some((WorkloadKind::Deployment, "web".to_string()))
        );
        // A Deployment whose name has dashes of its own.
        assert_eq!(
            owner_of(&rs_pod("gluesync-chronos-7c9d", "7c9d", "abcde")),
            Some((WorkloadKind::Deployment, "gluesync-chronos".to_string()))
        );
        // A ReplicaSet that no Deployment made: no hash label, or a name that does not end in it.
        let mut bare = rs_pod("web-5d4f8b9c7", "5d4f8b9c7", "x2k9p");
        bare.metadata
            .labels
            .as_mut()
            .unwrap()
            .remove(POD_TEMPLATE_HASH_LABEL);
        assert_eq!(owner_of(&bare), None);
        assert_eq!(owner_of(&rs_pod("web-5d4f8b9c7", "other", "x2k9p")), None);
        assert_eq!(owner_of(&rs_pod("5d4f8b9c7", "5d4f8b9c7", "x2k9p")), None);
        // Not a controller reference, another kind, no owner at all.
        assert_eq!(
            owner_of(&pod(
                "p",
                vec![owner("StatefulSet", "db", "db-uid", false)],
                &[]
            )),
            None
        );
        let mut job = owner("Job", "migrate", "job-uid", true);
        job.api_version = "batch/v1".into();
        assert_eq!(owner_of(&pod("p", vec![job], &[])), None);
        assert_eq!(owner_of(&pod("p", vec![], &[])), None);
    }

    #[test]
    fn statefulset_pods_are_found_through_their_owner() {
        let pods = [
            sts_pod("core-hub", 0),
            sts_pod("core-hub", 1),
            sts_pod("other", 0), // same labels, another StatefulSet
        ];

        // Overlapping selectors: the other StatefulSet's pods match the labels but are not this one's.
        let mut w = Workload::from_statefulset(&sts_named("core-hub", shared())).unwrap();
        w.attach_pods(&pods);
        assert_eq!(names(&w), ["core-hub-0", "core-hub-1"]);

        // A selector with matchExpressions only.
        let expressions = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: "In".into(),
                values: Some(vec!["shared".into()]),
            }]),
            ..Default::default()
        };
        let mut w = Workload::from_statefulset(&sts_named("core-hub", expressions)).unwrap();
        w.attach_pods(&pods);
        assert_eq!(names(&w), ["core-hub-0", "core-hub-1"]);

        // A pod of an earlier StatefulSet of the same name (another uid) is not this one's.
        let mut stale = sts_pod("core-hub", 2);
        stale.metadata.owner_references.as_mut().unwrap()[0].uid = "deleted-uid".into();
        let mut w = Workload::from_statefulset(&sts_named("core-hub", shared())).unwrap();
        assert!(!w.owns(&stale));
        w.attach_pods(pods.iter().chain([&stale]));
        assert_eq!(names(&w), ["core-hub-0", "core-hub-1"]);
    }

    #[test]
    fn deployment_pods_are_found_through_their_replicaset() {
        let pods = [
            rs_pod("web-5d4f8b9c7", "5d4f8b9c7", "aaaaa"),
            rs_pod("web-6b7c8d9f0", "6b7c8d9f0", "bbbbb"), // the old ReplicaSet, still terminating
            rs_pod("web-api-5d4f8b9c7", "5d4f8b9c7", "ccccc"), // Deployment "web-api"
            sts_pod("web", 0),                             // a StatefulSet called "web"
        ];
        let mut w = Workload::from_deployment(&deployment("web")).unwrap();
        assert_eq!(w.uid, "web-uid");
        w.attach_pods(&pods);
        assert_eq!(names(&w), ["web-5d4f8b9c7-aaaaa", "web-6b7c8d9f0-bbbbb"]);

        let mut w = Workload::from_deployment(&deployment("web-api")).unwrap();
        w.attach_pods(&pods);
        assert_eq!(names(&w), ["web-api-5d4f8b9c7-ccccc"]);
    }

    #[test]
    fn pod_view_keeps_uid_and_restarts() {
        let mut p = sts_pod("core-hub", 0);
        p.status = Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            container_statuses: Some(vec![ContainerStatus {
                name: "c".into(),
                restart_count: 3,
                ..Default::default()
            }]),
            ..Default::default()
        });
        let v = PodView::from_pod(&p, "c").unwrap();
        assert_eq!(v.uid, "core-hub-0-uid");
        assert_eq!(v.restarts, 3);
        assert!(v.ready);

        let mut w = Workload::from_statefulset(&sts_named("core-hub", shared())).unwrap();
        w.attach_pods([&p]);
        assert_eq!(w.pods, [v]);
    }

    #[test]
    fn statefulsets_that_never_roll_out_by_themselves() {
        let plain = sts_named("core-hub", shared());
        assert_eq!(
            Workload::from_statefulset(&plain).unwrap().rollout_blocker,
            None
        );

        let mut s = plain.clone();
        s.spec.as_mut().unwrap().update_strategy = Some(StatefulSetUpdateStrategy {
            type_: Some("OnDelete".into()),
            rolling_update: None,
        });
        let reason = Workload::from_statefulset(&s).unwrap().rollout_blocker;
        assert_eq!(
            reason.as_deref(),
            Some(
                "StatefulSet core-hub has updateStrategy OnDelete: its pods never take a new image \
                 by themselves; GKO needs RollingUpdate"
            )
        );

        let with_partition = |partition| {
            let mut s = plain.clone();
            s.spec.as_mut().unwrap().update_strategy = Some(StatefulSetUpdateStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateStatefulSetStrategy {
                    partition: Some(partition),
                    ..Default::default()
                }),
            });
            Workload::from_statefulset(&s).unwrap().rollout_blocker
        };
        assert_eq!(
            with_partition(2).as_deref(),
            Some(
                "StatefulSet core-hub has rollingUpdate.partition 2: pods below ordinal 2 keep the \
                 old image; GKO needs partition 0"
            )
        );
        assert_eq!(with_partition(0), None);
    }

    #[test]
    fn a_paused_deployment_never_rolls_out() {
        assert_eq!(
            Workload::from_deployment(&deployment("web"))
                .unwrap()
                .rollout_blocker,
            None
        );
        let mut d = deployment("web");
        d.spec.as_mut().unwrap().paused = Some(true);
        assert_eq!(
            Workload::from_deployment(&d)
                .unwrap()
                .rollout_blocker
                .as_deref(),
            Some(
                "Deployment web is paused (spec.paused: true): it rolls out no new image until it \
                 is resumed; GKO needs it unpaused"
            )
        );
    }

    #[test]
    fn progress_deadline_only_for_the_current_generation() {
        let exceeded = |generation, observed| {
            let mut d = deployment("web");
            d.metadata.generation = Some(generation);
            let status = d.status.as_mut().unwrap();
            status.observed_generation = Some(observed);
            status.conditions = Some(vec![DeploymentCondition {
                type_: "Progressing".into(),
                status: "False".into(),
                reason: Some("ProgressDeadlineExceeded".into()),
                ..Default::default()
            }]);
            Workload::from_deployment(&d)
                .unwrap()
                .progress_deadline_exceeded
        };
        assert!(exceeded(4, 4), "the current rollout ran out of time");
        assert!(
            !exceeded(5, 4),
            "left from the rollout before: the new spec is not seen yet"
        );
    }
}
