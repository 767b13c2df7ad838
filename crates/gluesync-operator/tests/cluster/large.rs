//! A very large install: 25,000 pipelines, more than the status holds (32 KiB of ids). The complete lists go
//! to ConfigMaps owned by the GluesyncPlatform before the status that names them; a GKO killed mid-update
//! reads them back, and every pipeline is resumed.

use crate::common;

use std::time::Duration;

use common::*;
use gko_test_support::eventually;
use gluesync_operator::api::{UpdateResult, UpdateStep};
use gluesync_simulator::{CatalogEntry, Options, Simulator};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, ResourceExt, api::ListParams};
use serde_json::json;

const PIPELINES: usize = 25_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_beyond_the_status_limit_live_in_configmaps() -> anyhow::Result<()> {
    let ns = namespace("large").await?;
    let sim = Simulator::start(Options::default()).await?;
    sim.add_pipelines("p", PIPELINES);
    sim.set_catalog("gluesync-core-hub", CatalogEntry::all("2.3.2.2"));
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 5}))?;
    let mut gko = Gko::spawn(&ns, GkoOptions::default())?;
    wait_settled(&ns).await?;

    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let g = wait_for_step(&ns, UpdateStep::CoreHub).await?;
    let status = g.status.clone().unwrap_or_default();
    // The status shows the first ids that fit in 2 KiB.
    let shown = serde_json::to_vec(&status.paused_pipelines)?.len();
    assert!(
        !status.paused_pipelines.is_empty()
            && shown <= gluesync_operator::cluster::spill::SHOWN_BYTES + 2,
        "the status shows {} ids in {shown} bytes",
        status.paused_pipelines.len()
    );
    assert_eq!(
        status.spilled_lists["pausedPipelines"].count,
        PIPELINES as i64
    );
    let size = serde_json::to_vec(&g)?.len();
    assert!(size < 64 * 1024, "the GluesyncPlatform is {size} bytes");
    let configmaps: Api<ConfigMap> = Api::namespaced(ns.client.clone(), &ns.name);
    let lists = configmaps
        .list(&ListParams::default().labels("gluesync.molo17.com/spilled-list=gluesync"))
        .await?;
    let ledger: Vec<_> = lists
        .items
        .iter()
        .filter(|c| {
            c.annotations()
                .get("gluesync.molo17.com/list")
                .map(String::as_str)
                == Some("pausedPipelines")
        })
        .collect();
    assert_eq!(ledger.len(), 2, "the ledger in two shards of 20,000 ids");
    assert!(
        lists.items.iter().all(|c| c
            .owner_references()
            .iter()
            .any(|o| o.kind == "GluesyncPlatform")),
        "owned by the platform"
    );
    assert_eq!(sim.in_maintenance().len(), PIPELINES);

    // Killed with the whole ledger only in ConfigMaps: the next GKO reads it back.
    gko.kill()?;
    let _gko = Gko::spawn(&ns, GkoOptions::default())?;
    let g = wait_finished(&ns, 2).await?;
    let status = g.status.unwrap_or_default();
    let attempt = status.last_attempt.clone().unwrap();
    assert_eq!(
        attempt.result,
        UpdateResult::Succeeded,
        "{}",
        attempt.message
    );
    assert_eq!(
        status.spilled_lists["lastAttempt.resumedPipelines"].count,
        PIPELINES as i64
    );
    assert!(status.paused_pipelines.is_empty());
    assert!(!status.spilled_lists.contains_key("pausedPipelines"));
    eventually(
        "every pipeline running",
        Duration::from_secs(60),
        || async { Ok(sim.in_maintenance().is_empty().then_some(())) },
    )
    .await?;
    assert!(sim.calls().enter.values().all(|n| *n == 1));
    // The ConfigMaps of the ledger go right after the status that no longer names them (GKO deletes
    // them after that write, as a user would see within moments); those of the last attempt stay.
    let names = || async {
        anyhow::Ok(
            configmaps
                .list(&ListParams::default().labels("gluesync.molo17.com/spilled-list=gluesync"))
                .await?
                .items
                .iter()
                .map(|c| c.name_any())
                .collect::<Vec<String>>(),
        )
    };
    eventually(
        "the ledger's ConfigMaps to go",
        Duration::from_secs(30),
        || async {
            let names = names().await?;
            Ok(names
                .iter()
                .all(|n| n.contains("lastattempt"))
                .then_some(()))
        },
    )
    .await?;
    let left = names().await?;
    assert!(
        !left.is_empty() && left.iter().all(|n| n.contains("lastattempt")),
        "{left:?}"
    );
    Ok(())
}
