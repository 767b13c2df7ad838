//! GKO's cluster tests, one test binary (`cluster`) with a module per subject: one link of the crate
//! instead of one per file. They run on the local control plane (`hack/controlplane.sh`), each test in a
//! namespace of its own; cargo-nextest runs them concurrently (`.config/nextest.toml`). The few that change
//! what a whole cluster shares (the CRD's own test, kube-apiserver and kwok restarted) run on control planes
//! of their own beside the shared one (`gko_test_support::own_control_plane`). `hack/test.sh update::` runs
//! one module, `hack/test.sh <name>` one test.

mod common;
// Helpers of some subjects: the Argo CD health check run by a real Lua 5.1, and an HTTPS listener that
// records what reaches it.
mod argocd;
mod tls_listener;

mod access;
mod argocd_health;
mod catalog;
mod chaos;
mod conductor;
mod controlplane;
mod corehub;
mod cost;
mod crds;
mod disaster;
mod foundation;
mod helm;
mod kstatus;
mod large;
mod leader;
mod lease;
mod monitoring;
mod pipelines;
mod prepull;
mod proxy;
mod restart;
mod security;
mod selfupdate;
mod update;
mod upgrade;
