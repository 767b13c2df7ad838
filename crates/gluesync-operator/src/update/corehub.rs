//! What the update wants of Core Hub and what it hears back: the [`Work`] handed to the background
//! worker (`corehub::worker`) and the worker's [`Report`], which the next decision reads.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::ids::{PipelineId, PipelineList};

/// Where and how to reach Core Hub, as the spec and the namespace say; the worker reads the Secrets.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub url: String,
    pub credentials_secret: Option<String>,
    pub ca_secret: Option<String>,
    pub insecure_skip_verify: bool,
}

impl Target {
    /// Core Hub of this platform: the spec's URL, else the Core Hub workload's Service on port 1717 over
    /// HTTPS. `None` when there is no Core Hub workload to name.
    pub fn of(
        gsp: &crate::api::GluesyncPlatform,
        workloads: &[crate::update::observed::Workload],
        namespace: &str,
    ) -> Option<Target> {
        let spec = &gsp.spec.core_hub;
        let url = match &spec.url {
            Some(u) => u.clone(),
            None => {
                let w = workloads
                    .iter()
                    .find(|w| w.component_type == Some(crate::api::ComponentType::CoreHub))?;
                format!("https://{}.{namespace}.svc:1717", w.name)
            }
        };
        Some(Target {
            url,
            credentials_secret: spec.credentials_secret.clone(),
            ca_secret: spec.ca_secret.clone(),
            insecure_skip_verify: spec.insecure_skip_verify,
        })
    }
}

/// What the update engine wants of Core Hub right now, handed to the background worker. Declarative:
/// the same work given twice is done once.
#[derive(Clone, Debug, PartialEq)]
pub struct Work {
    pub target: Target,
    /// Requests are sent once per epoch (an update, or the resumption of leftovers between updates).
    pub epoch: String,
    /// Pipelines to be asked, once this epoch, to enter maintenance mode. Each was recorded in
    /// `status.pausedPipelines` before it appears here.
    pub enter: PipelineList,
    /// Pipelines the update has asked in so far (`status.update.askedPipelines`). A worker that begins an
    /// epoch counts them as asked: a GKO that took over from one that stopped never asks a pipeline
    /// twice in one update, even when it cannot tell whether the request went out.
    pub asked: PipelineList,
    /// Pipelines to be asked to leave maintenance mode: once this epoch, and again while Core Hub still
    /// lists them in maintenance mode.
    pub exit: PipelineList,
    /// How often to list the pipelines.
    pub poll: Duration,
}

/// One `GET /pipelines`.
#[derive(Clone, Debug, PartialEq)]
pub struct Listing {
    /// When the request was sent: the list says nothing of what happened after.
    pub at: Time,
    pub result: Result<Arc<Vec<Pipeline>>, String>,
}

/// What the worker has seen and done for the current epoch: the engine reads it back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub epoch: String,
    /// The latest list of pipelines.
    pub listing: Option<Listing>,
    /// Exit requests Core Hub accepted this epoch, with when they were sent (shared: a report handed to
    /// the engine does not copy them).
    pub exits: Arc<BTreeMap<PipelineId, Time>>,
    /// Enter requests Core Hub accepted this epoch.
    pub entered: usize,
    /// The latest failed maintenance request, if the latest round had one.
    pub error: Option<String>,
}

/// A pipeline, with the fields GKO reads. `isInMaintenanceMode` is required: an answer without it (a
/// renamed field in a new Core Hub) is an error, never "running".
#[derive(Clone, Debug, PartialEq)]
pub struct Pipeline {
    pub id: PipelineId,
    pub is_in_maintenance_mode: bool,
}

/// The ids a listing shows in maintenance mode. (A B-tree: for 100,000 ids it is smaller than a hash
/// set and grows without a second table, which counts at the peak of a large update.)
pub fn in_maintenance(list: &[Pipeline]) -> std::collections::BTreeSet<&str> {
    list.iter()
        .filter(|p| p.is_in_maintenance_mode)
        .map(|p| p.id.as_str())
        .collect()
}
