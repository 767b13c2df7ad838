//! The `GluesyncPlatform` custom resource, and the labels and annotations GKO reads.
//!
//! The spec is what users (or the Core Hub UI, through GKO) ask for; the status is GKO's only memory: an
//! update in flight is carried entirely in `status.update`, so a restarted GKO carries it on.

mod disaster;
pub mod ids;
mod problem;
mod reason;
mod request;
mod spec;
mod status;
mod step;
#[cfg(test)]
mod tests;
pub mod version;

pub use disaster::*;
pub use spec::*;
pub use status::*;
pub use step::*;

pub use ids::{PipelineId, PipelineList};
pub use problem::Problem;
pub use reason::Reason;
pub use request::UiRequest;

/// API group of the custom resource.
pub const GROUP: &str = "gluesync.molo17.com";
/// Field manager of every write GKO makes.
pub const FIELD_MANAGER: &str = "gluesync-operator";
/// Label that marks the workloads GKO manages; its value is the component type.
pub const TYPE_LABEL: &str = "com.molo17.conductor.type";
/// Workload annotation naming the container whose image GKO changes (default: the first).
pub const CONTAINER_ANNOTATION: &str = "gluesync.molo17.com/container";
/// Annotation on the GluesyncPlatform: a new value asks for a catalog check at once.
pub const CHECK_NOW_ANNOTATION: &str = "gluesync.molo17.com/check-now";
/// Annotation on the GluesyncPlatform that GKO writes with an update request from the Core Hub UI:
/// `{"id": <requestID>, "channel": <release channel>}`. It applies to the update of that `spec.requestID`.
pub const REQUEST_ANNOTATION: &str = "gluesync.molo17.com/request";
/// Finalizer on the GluesyncPlatform while GKO may have paused pipelines or changed images that an update
/// has not settled: deleting the resource first resumes them.
pub const FINALIZER: &str = "gluesync.molo17.com/pipelines";
/// Annotation on GKO's own Deployment while it updates itself.
pub const SELF_UPDATE_ANNOTATION: &str = "gluesync.molo17.com/self-update";
