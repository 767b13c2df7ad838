//! The update's step: one value whose variants carry their own data and deadline.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;

/// The step of an update, with its own data. Serialized flat into `status.update`: `step` names it,
/// `since` is when it began, `deadline` when it gives up (steps whose components carry their own
/// deadlines have none).
///
/// Its variants' names, without their data, are [`UpdateStep`] (generated from this enum, in order).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, strum::EnumDiscriminants)]
#[strum_discriminants(
    name(UpdateStep),
    derive(
        PartialOrd,
        Ord,
        Hash,
        strum::VariantNames,
        Serialize,
        Deserialize,
        JsonSchema
    )
)]
#[serde(tag = "step")]
pub enum Step {
    /// Checking the request; waits for the catalog's answer until `deadline`.
    Preflight { since: Time, deadline: Time },
    /// Recording the image of every component.
    Snapshot { since: Time },
    /// Pulling the new Core Hub and agent images on the nodes that run their pods, until `deadline`
    /// (`prePull.timeoutSeconds`), then Refused; nothing paused.
    PrePull { since: Time, deadline: Time },
    /// Nothing paused, nothing changed: waiting for the approval (until `deadline`, then Refused) or for
    /// a maintenance window (no deadline).
    Waiting {
        since: Time,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline: Option<Time>,
    },
    /// Putting the running pipelines into maintenance mode, until `deadline` (drainTimeoutSeconds), with
    /// the pipelines it asked so far (`askedPipelines`, see [`ASKED_PIPELINES`]): gone with the step.
    Drain {
        since: Time,
        deadline: Time,
        /// Written whole from its first status on, even empty (`[]`): a Drain without it was written by a
        /// release that kept no such record (0.3.0), and its ledger's pipelines count as asked.
        #[serde(
            rename = "askedPipelines",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        asked_pipelines: Option<PipelineList>,
    },
    /// Changing Core Hub and the agents, then their stability check, until `deadline`.
    CoreHub { since: Time, deadline: Time },
    /// Putting Core Hub back on its previous image, until `deadline`.
    CoreHubRollback { since: Time, deadline: Time },
    /// Taking the paused pipelines out of maintenance mode; at `deadline` the update goes on and GKO
    /// keeps resuming the rest between updates.
    Resume { since: Time, deadline: Time },
    /// One module at a time, each with its own stability deadline.
    Modules { since: Time },
    /// Recording the outcome.
    Finish { since: Time },
}

impl Step {
    /// Which step this is.
    pub fn name(&self) -> UpdateStep {
        self.into()
    }

    /// The pipelines Drain asked so far (none in another step).
    pub fn asked_pipelines(&self) -> Option<&PipelineList> {
        match self {
            Step::Drain {
                asked_pipelines, ..
            } => asked_pipelines.as_ref(),
            _ => None,
        }
    }

    pub fn asked_pipelines_mut(&mut self) -> Option<&mut PipelineList> {
        match self {
            Step::Drain {
                asked_pipelines, ..
            } => asked_pipelines.as_mut(),
            _ => None,
        }
    }

    /// When the step began.
    pub fn since(&self) -> &Time {
        match self {
            Step::Preflight { since, .. }
            | Step::Snapshot { since }
            | Step::PrePull { since, .. }
            | Step::Waiting { since, .. }
            | Step::Drain { since, .. }
            | Step::CoreHub { since, .. }
            | Step::CoreHubRollback { since, .. }
            | Step::Resume { since, .. }
            | Step::Modules { since }
            | Step::Finish { since } => since,
        }
    }

    /// When the step gives up, for the steps that have one deadline.
    pub fn deadline(&self) -> Option<&Time> {
        match self {
            Step::Preflight { deadline, .. }
            | Step::PrePull { deadline, .. }
            | Step::Drain { deadline, .. }
            | Step::CoreHub { deadline, .. }
            | Step::CoreHubRollback { deadline, .. }
            | Step::Resume { deadline, .. } => Some(deadline),
            Step::Waiting { deadline, .. } => deadline.as_ref(),
            _ => None,
        }
    }
}

/// `status.update` is an object whose `step` names the variant; the step's fields sit beside it.
/// What `status.update.askedPipelines` (Drain's) means.
pub const ASKED_PIPELINES: &str = "Pipelines this update asked to enter maintenance mode, each recorded \
    before its request was sent (Drain only). A GKO that takes over asks none of them again, except once \
    each one Core Hub still lists running 15 s after it took over (the GKO before it may have stopped \
    before sending).";

impl JsonSchema for Step {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Step".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        use strum::VariantNames;
        let (last, first) = UpdateStep::VARIANTS
            .split_last()
            .expect("an update has steps");
        let steps = format!("The step that runs: {} or {last}.", first.join(", "));
        schemars::json_schema!({
            "type": "object",
            "required": ["step"],
            "properties": {
                "step": {
                    "description": steps,
                    "type": "string",
                    "enum": UpdateStep::VARIANTS,
                },
                "since": {"description": "When the step began.", "type": "string", "format": "date-time"},
                "deadline": {"description": "When the step gives up.", "type": "string", "format": "date-time"},
                "askedPipelines": {"description": ASKED_PIPELINES, "type": "array", "items": {"type": "string"}},
            },
        })
    }
}
