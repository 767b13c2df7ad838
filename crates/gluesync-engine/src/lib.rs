//! GKO's engine: the `GluesyncPlatform`'s types ([`api`]) and the update's decisions ([`update`]), pure
//! functions of what GKO observed. It does no I/O: the operator crate watches, calls Core Hub and writes,
//! and hands the engine what it saw. Cargo keeps it so: this crate depends on no HTTP stack, no async
//! runtime and no Kubernetes client.

pub mod api;
pub mod update;
