//! Cluster tests of the version catalog checks: UpdateAvailable, check-now, offline, a failing catalog.

use crate::common;

use std::time::Duration;

use common::*;
use gluesync_operator::api::{CHECK_NOW_ANNOTATION, Phase, UpdateResult};
use gluesync_simulator::CatalogEntry;
use serde_json::json;

fn available(g: &gluesync_operator::api::GluesyncPlatform) -> Option<String> {
    g.status.as_ref()?.available.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_version_in_the_catalog_shows_as_update_available() -> anyhow::Result<()> {
    let ns = namespace("available").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    let _gko = Operator::start(&ns);
    let g = wait_available(&ns).await?;
    let status = g.status.unwrap_or_default();
    assert_eq!(status.available.as_deref(), Some("2.3.2.2"));
    let chronos = status
        .components
        .iter()
        .find(|c| c.name == "gluesync-gluesync-chronos")
        .unwrap();
    assert_eq!(chronos.available.as_deref(), Some("0.3.3"));
    assert!(status.catalog.and_then(|c| c.last_checked_at).is_some());
    let row = ns.kubectl(&["get", "gsp", "--no-headers"])?;
    let cols: Vec<_> = row.split_whitespace().collect();
    assert_eq!(
        &cols[..5],
        [
            "gluesync",
            "UpdateAvailable",
            "2.3.2.1",
            "2.3.2.1",
            "2.3.2.2"
        ],
        "{row}"
    );

    // One check per interval: nothing more is asked of the catalog while nothing changes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calls = sim.calls().catalog;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(sim.calls().catalog, calls);

    // A newer release, and a check asked for at once.
    sim.set_catalog("gluesync-core-hub", CatalogEntry::all("2.3.2.3"));
    ns.kubectl(&[
        "annotate",
        "gsp",
        "gluesync",
        "--overwrite",
        &format!("{CHECK_NOW_ANNOTATION}=1"),
    ])?;
    let g = wait_for_platform(&ns, "AVAILABLE 2.3.2.3", |g| {
        available(g).as_deref() == Some("2.3.2.3")
    })
    .await?;
    assert_eq!(
        g.status
            .and_then(|s| s.catalog)
            .and_then(|c| c.observed_check_now)
            .as_deref(),
        Some("1")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_install_shows_no_available_version_and_never_calls_out() -> anyhow::Result<()> {
    let ns = namespace("offline").await?;
    let sim = simulator().await?;
    install_with_simulator(
        &ns,
        &sim,
        json!({"catalog": {"url": null, "offline": true}, "stabilityWindowSeconds": 0}),
    )?;
    let _gko = Operator::start(&ns);
    let g = wait_for_platform(&ns, "phase Current", |g| {
        g.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(Phase::Current))
    })
    .await?;
    assert_eq!(available(&g), None);
    let row = ns.kubectl(&["get", "gsp", "--no-headers"])?;
    assert_eq!(
        row.split_whitespace().count(),
        5,
        "AVAILABLE is empty: {row}"
    );
    ns.kubectl(&[
        "annotate",
        "gsp",
        "gluesync",
        "--overwrite",
        &format!("{CHECK_NOW_ANNOTATION}=1"),
    ])?;

    // Updates still run, from spec.version; unpinned modules stay as they are.
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let g = wait_for_platform(&ns, "the update", |g| {
        g.status
            .as_ref()
            .is_some_and(|s| s.update.is_none() && s.last_attempt.is_some())
    })
    .await?;
    let attempt = g.status.unwrap_or_default().last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded);
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-chronos").await?,
        "molo17/gluesync-chronos:0.3.2"
    );
    assert_eq!(
        sim.calls().catalog,
        0,
        "an offline install called the catalog"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_catalog_leaves_status_says_why_and_blocks_no_update() -> anyhow::Result<()> {
    let ns = namespace("catalog-down").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 0}))?;
    let _gko = Operator::start(&ns);
    wait_for_platform(&ns, "AVAILABLE 2.3.2.2", |g| {
        available(g).as_deref() == Some("2.3.2.2")
    })
    .await?;

    sim.set_catalog_maintenance(true);
    ns.kubectl(&[
        "annotate",
        "gsp",
        "gluesync",
        "--overwrite",
        &format!("{CHECK_NOW_ANNOTATION}=2"),
    ])?;
    let g = wait_for_platform(&ns, "the failed check in status", |g| {
        g.status
            .as_ref()
            .and_then(|s| s.catalog.as_ref())
            .is_some_and(|c| c.error.is_some())
    })
    .await?;
    let status = g.status.unwrap_or_default();
    assert!(
        status
            .catalog
            .unwrap_or_default()
            .error
            .unwrap_or_default()
            .contains("maintenance")
    );
    assert_eq!(
        status.available.as_deref(),
        Some("2.3.2.2"),
        "the last known version stays"
    );
    assert_eq!(status.phase, Some(Phase::UpdateAvailable));
    // The Warning event follows the status write.
    gko_test_support::eventually(
        "a CatalogCheckFailed event",
        Duration::from_secs(30),
        || {
            let ns = &ns;
            async move {
                let reasons = event_reasons(ns).await?;
                Ok(reasons
                    .iter()
                    .any(|r| r == "CatalogCheckFailed")
                    .then_some(()))
            }
        },
    )
    .await?;

    // An update that names its versions does not need the catalog.
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let g = wait_for_platform(&ns, "the update", |g| {
        g.status
            .as_ref()
            .is_some_and(|s| s.update.is_none() && s.last_attempt.is_some())
    })
    .await?;
    let attempt = g.status.unwrap_or_default().last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_is_checked_again_after_one_interval() -> anyhow::Result<()> {
    let ns = namespace("interval").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({"checkIntervalMinutes": 1}))?;
    let _gko = Operator::start(&ns);
    wait_for_platform(&ns, "AVAILABLE 2.3.2.2", |g| {
        available(g).as_deref() == Some("2.3.2.2")
    })
    .await?;
    let calls = sim.calls().catalog;
    sim.set_catalog("gluesync-core-hub", CatalogEntry::all("2.3.2.3"));
    // No annotation, no event on the cluster: only the interval brings the next check.
    let g = gko_test_support::eventually(
        "AVAILABLE 2.3.2.3 after one interval",
        Duration::from_secs(90),
        || {
            let api = platforms(&ns);
            async move {
                let g = api.get("gluesync").await?;
                Ok((available(&g).as_deref() == Some("2.3.2.3")).then_some(g))
            }
        },
    )
    .await?;
    assert!(sim.calls().catalog > calls);
    assert!(
        g.status
            .and_then(|s| s.catalog)
            .and_then(|c| c.last_checked_at)
            .is_some()
    );
    Ok(())
}
