//! What GKO reads from and writes to the cluster.
//!
//! Reading: the labelled StatefulSets and Deployments of the namespace become [`Workload`]s, a pure
//! projection that the rest of GKO works on. Writing: every write GKO makes goes through [`Writer`], the one
//! place a leader-election Lease will gate.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    core::v1::{ObjectReference, Pod, PodTemplateSpec},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::events::{Event, EventType, Recorder, Reporter},
};
use serde_json::json;

use crate::{
    api::{
        CONTAINER_ANNOTATION, ComponentStatus, ComponentType, FIELD_MANAGER, GluesyncPlatform,
        GluesyncPlatformStatus, TYPE_LABEL, WorkloadKind,
    },
    metrics::Metrics,
    version::ImageRef,
};

/// A labelled StatefulSet or Deployment, as GKO sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub name: String,
    /// The label value, or `None` when it is not one GKO knows.
    pub component_type: Option<ComponentType>,
    pub label_value: String,
    /// The container whose image GKO manages, or `None` when the annotation names one that is not there.
    pub container: Option<String>,
    /// That container's image ("" when there is none).
    pub image: String,
    /// The workload controller has seen the latest spec, and every replica runs it and is ready.
    pub ready: bool,
    /// A Deployment that ran out of its progress deadline.
    pub progress_deadline_exceeded: bool,
    /// The workload's pod selector (`matchLabels`).
    pub selector: BTreeMap<String, String>,
    /// Its pods, seen through the managed container.
    pub pods: Vec<PodView>,
}

/// A pod of a managed workload, as the stability check reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct PodView {
    pub name: String,
    /// Image of the managed container.
    pub image: String,
    pub ready: bool,
    /// Why the managed container waits, if it does: (reason, message).
    pub waiting: Option<(String, String)>,
    pub restarts: i32,
}

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
            image,
            ready,
            waiting,
            restarts: cs.map_or(0, |c| c.restart_count),
        })
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
            label_value,
            sts.annotations()
                .get(CONTAINER_ANNOTATION)
                .map(String::as_str),
            &spec.template,
            ready,
        );
        w.selector = spec.selector.match_labels.clone().unwrap_or_default();
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
            label_value,
            deploy
                .annotations()
                .get(CONTAINER_ANNOTATION)
                .map(String::as_str),
            &spec.template,
            ready,
        );
        w.selector = spec.selector.match_labels.clone().unwrap_or_default();
        w.progress_deadline_exceeded = status.conditions.unwrap_or_default().iter().any(|c| {
            c.type_ == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
        });
        Some(w)
    }

    fn new(
        kind: WorkloadKind,
        name: String,
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
            component_type: ComponentType::from_label(&label_value),
            label_value,
            container: container.map(|c| c.name.clone()),
            image: container.and_then(|c| c.image.clone()).unwrap_or_default(),
            ready,
            progress_deadline_exceeded: false,
            selector: BTreeMap::new(),
            pods: Vec::new(),
        }
    }

    /// Takes in the pods its selector matches.
    pub fn attach_pods<'a>(&mut self, pods: impl IntoIterator<Item = &'a Pod>) {
        let Some(container) = self.container.clone() else {
            return;
        };
        if self.selector.is_empty() {
            return;
        }
        self.pods = pods
            .into_iter()
            .filter(|p| {
                let labels = p.labels();
                self.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            })
            .filter_map(|p| PodView::from_pod(p, &container))
            .collect();
        self.pods.sort_by(|a, b| a.name.cmp(&b.name));
    }

    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::Deployment => "Deployment",
        }
    }

    /// The version its image runs, when the tag carries one.
    pub fn version(&self) -> Option<String> {
        let image = ImageRef::parse(&self.image);
        image
            .version_text()
            .filter(|v| v.parse::<crate::version::Version>().is_ok())
            .map(str::to_string)
    }

    /// Its line in `status.components`; `None` for a workload GKO cannot manage.
    pub fn component_status(&self, available: Option<String>) -> Option<ComponentStatus> {
        Some(ComponentStatus {
            name: self.name.clone(),
            component_type: self.component_type?,
            kind: self.kind,
            image: self.image.clone(),
            version: self.version(),
            available,
            ready: self.ready,
        })
    }
}

/// Every write GKO makes to the cluster. One place, so that leader election can gate all of them.
#[derive(Clone)]
pub struct Writer {
    client: Client,
    recorder: Arc<Recorder>,
    metrics: Arc<Metrics>,
}

/// A write refused by the API server because the object changed since it was read.
pub fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409)
}

impl Writer {
    pub fn new(client: Client, metrics: Arc<Metrics>, instance: Option<String>) -> Writer {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance,
        };
        Writer {
            recorder: Arc::new(Recorder::new(client.clone(), reporter)),
            client,
            metrics,
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Writes the whole status, owned by GKO's field manager. The object's `resourceVersion` goes with it,
    /// so a status computed from a stale read is refused (409) instead of undoing a newer one.
    pub async fn write_status(
        &self,
        gsp: &GluesyncPlatform,
        status: &GluesyncPlatformStatus,
    ) -> Result<GluesyncPlatform, kube::Error> {
        let result = self
            .apply_to_platform(gsp, "status", json!(status), true)
            .await;
        self.metrics.status_writes.inc();
        result
    }

    /// Sets the image of one container of a managed workload, and nothing else. Server-side apply under
    /// GKO's field manager, forced: GKO owns the images it writes.
    pub async fn set_image(
        &self,
        namespace: &str,
        kind: WorkloadKind,
        name: &str,
        container: &str,
        image: &str,
    ) -> Result<(), kube::Error> {
        let kind_name = match kind {
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::Deployment => "Deployment",
        };
        let patch = json!({
            "apiVersion": "apps/v1",
            "kind": kind_name,
            "metadata": { "name": name },
            "spec": { "template": { "spec": { "containers": [ { "name": container, "image": image } ] } } },
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.metrics.workload_writes.inc();
        match kind {
            WorkloadKind::StatefulSet => {
                Api::<StatefulSet>::namespaced(self.client.clone(), namespace)
                    .patch(name, &params, &Patch::Apply(&patch))
                    .await
                    .map(|_| ())
            }
            WorkloadKind::Deployment => {
                Api::<Deployment>::namespaced(self.client.clone(), namespace)
                    .patch(name, &params, &Patch::Apply(&patch))
                    .await
                    .map(|_| ())
            }
        }
    }

    /// Deletes a pod (a stuck pod of a failed StatefulSet revision, so the rollback can proceed).
    pub async fn delete_pod(&self, namespace: &str, name: &str) -> Result<(), kube::Error> {
        self.metrics.workload_writes.inc();
        match Api::<Pod>::namespaced(self.client.clone(), namespace)
            .delete(name, &Default::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Writes an update request from the Core Hub UI into the spec: `version`, `modules` and a fresh
    /// `requestID`, under GKO's field manager. The controller then runs it like any other spec change.
    pub async fn write_update_request(
        &self,
        gsp: &GluesyncPlatform,
        version: &str,
        modules: &BTreeMap<String, String>,
        request_id: &str,
    ) -> Result<GluesyncPlatform, kube::Error> {
        let spec = json!({ "version": version, "modules": modules, "requestID": request_id });
        self.apply_to_platform(gsp, "spec", spec, false).await
    }

    /// Server-side apply of one part (`spec` or `status`) of a GluesyncPlatform under GKO's field manager,
    /// with the resourceVersion it was read at: a write computed from a stale read is refused (409).
    async fn apply_to_platform(
        &self,
        gsp: &GluesyncPlatform,
        part: &str,
        value: serde_json::Value,
        subresource: bool,
    ) -> Result<GluesyncPlatform, kube::Error> {
        let ns = gsp.namespace().unwrap_or_default();
        let api: Api<GluesyncPlatform> = Api::namespaced(self.client.clone(), &ns);
        let mut patch = json!({
            "apiVersion": GluesyncPlatform::api_version(&()),
            "kind": GluesyncPlatform::kind(&()),
            "metadata": { "resourceVersion": gsp.resource_version() },
        });
        patch[part] = value;
        let params = PatchParams::apply(FIELD_MANAGER).force();
        if subresource {
            api.patch_status(&gsp.name_any(), &params, &Patch::Apply(&patch))
                .await
        } else {
            api.patch(&gsp.name_any(), &params, &Patch::Apply(&patch))
                .await
        }
    }

    /// Records an event on the GluesyncPlatform.
    pub async fn event(
        &self,
        gsp: &GluesyncPlatform,
        type_: EventType,
        reason: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        let reference: ObjectReference = gsp.object_ref(&());
        self.metrics.events.inc();
        self.recorder
            .publish(
                &Event {
                    type_,
                    reason: reason.into(),
                    note: Some(note),
                    action: reason.into(),
                    secondary: None,
                },
                &reference,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::{
        apps::v1::{StatefulSetSpec, StatefulSetStatus},
        core::v1::{Container, PodSpec},
    };
    use kube::api::ObjectMeta;

    use super::*;

    fn sts(containers: &[(&str, &str)], annotation: Option<&str>) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                name: Some("gluesync-gluesync-core-hub".into()),
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

    #[test]
    fn the_first_container_or_the_annotated_one() {
        let two = [
            ("sidecar", "envoy:1.0"),
            ("core-hub", "molo17/gluesync-core-hub:2.3.2.1"),
        ];
        let w = Workload::from_statefulset(&sts(&two, None)).unwrap();
        assert_eq!(w.container.as_deref(), Some("sidecar"));
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
    }

    #[test]
    fn unlabelled_workloads_are_not_managed() {
        let mut s = sts(&[("c", "x:1")], None);
        s.metadata.labels = None;
        assert!(Workload::from_statefulset(&s).is_none());
    }
}
