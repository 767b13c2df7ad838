//! What GKO sees of its namespace when it decides: the labelled workloads with their pods, projected from
//! the watch caches (by `cluster`) into plain values the engine reads.

use k8s_openapi::api::core::v1::PodTemplateSpec;

use crate::api::{ComponentStatus, ComponentType, WorkloadKind, version::ImageRef};

/// A labelled StatefulSet or Deployment, as GKO sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub name: String,
    /// Its `metadata.uid`: a StatefulSet's pods name it in their ownerReference.
    pub uid: String,
    /// The label value, or `None` when it is not one GKO knows.
    pub component_type: Option<ComponentType>,
    pub label_value: String,
    /// The container whose image GKO manages, or `None` when the annotation names one that is not there.
    pub container: Option<String>,
    /// That container's image ("" when there is none).
    pub image: String,
    /// The workload controller has seen the latest spec, and every replica runs it and is ready.
    pub ready: bool,
    /// A Deployment that ran out of its progress deadline in its current rollout (the condition is read only
    /// once the Deployment controller has seen the latest spec, so one left from an earlier rollout does
    /// not count).
    pub progress_deadline_exceeded: bool,
    /// Why a new image would never roll out by itself, when that is so: a StatefulSet with
    /// `updateStrategy.type: OnDelete` or a `rollingUpdate.partition` above 0, a paused Deployment.
    pub rollout_blocker: Option<String>,
    /// Its pods (those it owns: named by their controller's ownerReference), seen through the managed
    /// container.
    pub pods: Vec<PodView>,
    /// GKO's own Deployment: the phase in its `gluesync.molo17.com/self-update` annotation, if any.
    pub self_update_mark: Option<String>,
    /// Its pod template, as the workload's spec has it (what a disaster-recovery setup changes).
    pub template: Box<PodTemplateSpec>,
    /// Its `spec.selector.matchLabels`: the pods a Service in front of it selects.
    pub selector: std::collections::BTreeMap<String, String>,
}

/// A pod of a managed workload, as the stability check reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct PodView {
    pub name: String,
    /// Its `metadata.uid`: a pod replaced under the same name is another pod.
    pub uid: String,
    /// Image of the managed container.
    pub image: String,
    pub ready: bool,
    /// Why the managed container waits, if it does: (reason, message).
    pub waiting: Option<(String, String)>,
    /// Restart count of the managed container.
    pub restarts: i32,
    /// The node it runs on, once scheduled.
    pub node: Option<String>,
    /// The disaster-recovery setup its template carried (its `gluesync.molo17.com/disaster-recovery`
    /// annotation), if any.
    pub dr_mark: Option<String>,
}

impl Workload {
    /// The disaster-recovery setup its pod template carries, if any.
    pub fn dr_mark(&self) -> Option<&str> {
        self.template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(crate::api::DR_ANNOTATION))
            .map(String::as_str)
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
            .filter(|v| v.parse::<crate::api::version::Version>().is_ok())
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

/// A pre-pull pod of a GluesyncPlatform (labelled `gluesync.molo17.com/pre-pull`), as the engine reads it;
/// or one the API server refused to create.
#[derive(Clone, Debug, PartialEq)]
pub struct PrePullPod {
    pub name: String,
    /// The GluesyncPlatform it pulls for (its label's value).
    pub platform: String,
    /// The uid of the GluesyncPlatform that controls it (its controller owner reference): a pod GKO
    /// made has its platform's; a pod labelled by someone else may have none, and is never touched.
    pub owner: Option<String>,
    pub node: String,
    pub image: String,
    pub state: PullState,
}

/// Where a pre-pull stands.
#[derive(Clone, Debug, PartialEq)]
pub enum PullState {
    /// Not pulled yet (the pod is created and waits for its image).
    Pulling,
    /// The image is on the node: its container ran, or was at least created (the image's own command
    /// may not exist; the pull is what counts).
    Pulled,
    /// The pull failed: the container waits with this reason and message.
    Failed(String, String),
    /// The API server refused to create the pod, at this time, with this message.
    Refused(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time, String),
}
