//! `gko-bench`: GKO's figures on the local control plane, printed, never asserted.
//!
//! - reaction: a `spec.version` change to `status.phase=Updating`, p50 and p99 over 50 runs, beside the raw
//!   watch latency (a label patch on the GluesyncPlatform to a watch in this process seeing it, p50 and p99
//!   over the same 50 runs, interleaved) and the ratio reaction/watch;
//! - reaction while Core Hub hangs and the catalog is slow: the same `spec.version` change to
//!   `status.phase=Updating`, p50 and p99 over 50 runs, with Core Hub hanging (`Faults::hang`, pipelines
//!   left in the ledger so that GKO's calls to resume them hang) and the catalog answering after 60 s
//!   (`catalog_delay_ms`, a check-now catalog check in flight), set before each change; printed beside the
//!   normal reaction and the raw watch latency (measured in the same runs), with the ratio to the latter;
//! - reaction against the number of labelled workloads (4, 20, 100), beside the raw watch latency;
//! - GKO's own overhead in a whole update (stability window 0, pods ready at once): the update's wall time
//!   less the time the API server and kwok take to roll the same images out without GKO (a twin of Core
//!   Hub's StatefulSet that no GKO manages, rolled just before each update: each pair shares the
//!   machine's speed of the moment; the end of both seen through a watch, which loads the API server no
//!   more for one than the other), the median of the pairs;
//! - pipelines: for 1,000, 10,000 and 100,000 pipelines on the simulator, drain, resume and whole-update
//!   time, GKO's CPU seconds for the update, its resident memory idle and at the peak, and the
//!   GluesyncPlatform's size;
//! - unrelated pods: for 0 (the baseline), 500, 2,000 and 5,000 pods of a Deployment GKO does not manage
//!   in its namespace, GKO's resident memory, reconciles per minute and cached pods idle, then its peak
//!   memory and reconciles during a rollout of those pods, and the reconciles their deletion causes;
//! - the Conductor API's throughput (`GET /containers`) for manager sessions GKO knows, for a flood of bad
//!   tokens, and for both at once, in phases of equal length on one GKO: requests per second by answer
//!   (200, 401, 429, other), and the Core Hub identity checks each phase cost;
//! - strangers' unfinished request heads: 512 connections to the Conductor API and 64 to the metrics
//!   port, each sending 400 KiB of a head that never ends; GKO's resident memory idle and at its peak,
//!   what became of the connections, and a manager's request meanwhile.
//!
//! GKO runs as its release binary (`target/release/gluesync-operator`, built by `make bench`), the
//! simulator in this process. Run with `make bench`; `gko-bench NAME...` runs only the named figures
//! (`reaction`, `workloads`, `hang`, `overhead`, `prepull`, `pipelines`, `unrelated`, `conductor`,
//! `heads`); `gko-bench lease` compares GKO's elector with `kube-lease-manager` (see `lease.rs`).

mod common;
mod conductor;
mod lease;
mod overhead;
mod pipelines;
mod reaction;
mod unrelated;

use common::*;
use conductor::*;
use overhead::*;
use pipelines::*;
use reaction::*;
use unrelated::*;

use std::{
    collections::HashMap,
    os::unix::process::CommandExt as _,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use futures::StreamExt;
use gko_test_support::TestNamespace;
use gluesync_engine::api::{
    CHECK_NOW_ANNOTATION, FIELD_MANAGER, GluesyncPlatform, Phase, UpdateResult, UpdateStep,
};
use gluesync_simulator::{CatalogEntry, Options, Simulator};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;
use strum::VariantNames as _;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let which: Vec<String> = std::env::args().skip(1).collect();
    let all = which.is_empty();
    let wants = |name: &str| all || which.iter().any(|w| w == name);
    gko_test_support::control_plane();
    let normal = if wants("reaction") {
        Some(reaction(50).await?)
    } else {
        None
    };
    if wants("workloads") {
        reaction_workloads(20).await?;
    }
    if wants("hang") {
        reaction_hung(50, normal.as_ref()).await?;
    }
    if wants("overhead") {
        overhead(20).await?;
    }
    if wants("prepull") {
        prepull().await?;
    }
    if wants("pipelines") {
        pipelines().await?;
    }
    if wants("unrelated") {
        unrelated().await?;
    }
    if wants("conductor") {
        conductor_load(Duration::from_secs(5)).await?;
    }
    if wants("heads") {
        heads().await?;
    }
    // Not part of `make bench`: the measure behind docs/development/benchmarks.md's word on why GKO keeps its own elector.
    if which.iter().any(|w| w == "lease") {
        lease::compare().await?;
    }
    Ok(())
}
