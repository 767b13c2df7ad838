//! GluesyncPlatforms that do not parse.

use kube::{
    ResourceExt,
    core::{DeserializeGuard, error_boundary::InvalidObject},
    runtime::{controller::Action as Requeue, events::EventType},
};
use tracing::warn;

use super::Context;
use crate::{
    api::{GluesyncPlatform, Reason},
    background::lock,
    cluster::wording::Said,
};

/// A GluesyncPlatform that does not parse: said once per resourceVersion as a Warning event (and in the
/// log); nothing is done to it, and the others are reconciled as ever. Its next change is looked at anew.
pub(super) async fn not_parsed(
    ctx: &Context,
    guard: &DeserializeGuard<GluesyncPlatform>,
    invalid: &InvalidObject,
) -> Requeue {
    let view = &ctx.view;
    if !view.writer.leadership().is_leader() {
        return Requeue::await_change();
    }
    // Every workload or pod change reconciles every platform: this version is said once.
    let version = guard.resource_version().unwrap_or_default();
    let said = lock(&ctx.unparsed)
        .insert(guard.uid().unwrap_or_default(), version.clone())
        .is_some_and(|before| before == version);
    if said {
        return Requeue::await_change();
    }
    warn!(error = %invalid.error, "the GluesyncPlatform does not parse; fix it with kubectl edit");
    if let Err(e) = view
            .writer
            .event(
                guard,
                EventType::Warning,
                Reason::InvalidResource.as_str(),
                format!(
                    "GKO cannot read this GluesyncPlatform ({}); it changes nothing until the resource is fixed",
                    invalid.error
                ),
            )
    {
        warn!(error = %Said(&e), "recording an event failed");
    }
    Requeue::await_change()
}
