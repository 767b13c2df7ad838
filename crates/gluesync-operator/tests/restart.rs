//! GKO killed (SIGKILL) at each step of an update and started again: every update ends as it would have
//! without the kill, with no pipeline left in maintenance mode and one history entry.

mod common;

use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

use common::*;
use gko_test_support::TestNamespace;
use gluesync_operator::api::{UpdateResult, UpdateStep};
use serde_json::json;

/// The operator binary, as a user runs it, on the test's namespace.
fn spawn_gko(ns: &TestNamespace) -> anyhow::Result<Child> {
    Ok(Command::new(env!("CARGO_BIN_EXE_gluesync-operator"))
        .args([
            "run",
            "--namespace",
            &ns.name,
            "--metrics-addr",
            "127.0.0.1:0",
            "--conductor-addr",
            "off",
        ])
        .env("KUBECONFIG", &ns.cp.kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_survives_gko_killed_at_each_step() -> anyhow::Result<()> {
    let ns = namespace("restart").await?;
    let sim = simulator().await?;
    // Slow enough that each step can be caught running.
    sim.update_faults(|f| {
        f.maintenance_delay_ms = 400;
        f.catalog_delay_ms = 300;
    });
    install_with_simulator(
        &ns,
        &sim,
        json!({"stabilityWindowSeconds": 2, "catalog": {"url": sim.url}}),
    )?;
    let mut gko = spawn_gko(&ns)?;
    wait_settled(&ns).await?;

    let steps = [
        UpdateStep::Preflight,
        UpdateStep::Snapshot,
        UpdateStep::Drain,
        UpdateStep::CoreHub,
        UpdateStep::Resume,
        UpdateStep::Modules,
        UpdateStep::Finish,
    ];
    let api = platforms(&ns);
    for (i, step) in steps.into_iter().enumerate() {
        let (version, chronos) = if i % 2 == 0 {
            ("2.3.2.2", "0.3.3")
        } else {
            ("2.3.2.1", "0.3.2")
        };
        let before = api.get("gluesync").await?;
        let history = before.status.as_ref().map_or(0, |s| s.history.len());
        let generation = before.metadata.generation.unwrap_or(0) + 1;
        patch_spec(
            &ns,
            json!({"version": version, "modules": {"gluesync-gluesync-chronos": chronos}}),
        )
        .await?;

        // Kill GKO as soon as the update is seen at (or past) the step.
        let killed_at = loop {
            let g = api.get("gluesync").await?;
            let status = g.status.unwrap_or_default();
            match status.update {
                Some(u) if u.step >= step => break Some(u.step),
                None if status.last_attempt.as_ref().and_then(|a| a.generation)
                    == Some(generation) =>
                {
                    break None;
                }
                _ => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        };
        gko.kill()?;
        gko.wait()?;
        println!("aiming at {step:?}: killed GKO during {killed_at:?}");
        gko = spawn_gko(&ns)?;

        let g = wait_for_platform(&ns, "the update to finish after the restart", |g| {
            g.status.as_ref().is_some_and(|s| {
                s.update.is_none()
                    && s.last_attempt.as_ref().and_then(|a| a.generation) == Some(generation)
            })
        })
        .await?;
        let status = g.status.unwrap_or_default();
        let attempt = status
            .last_attempt
            .clone()
            .unwrap_or_else(|| unreachable!());
        assert_eq!(
            attempt.result,
            UpdateResult::Succeeded,
            "killed during {killed_at:?}: {attempt:?}"
        );
        assert_eq!(
            status.history.len(),
            history + 1,
            "killed during {killed_at:?}: one history entry"
        );
        assert_eq!(status.version.as_deref(), Some(version));
        assert_eq!(
            image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
            format!("molo17/gluesync-core-hub:{version}")
        );
        assert_eq!(
            image_of(&ns, "statefulset", "gluesync-gluesync-chronos").await?,
            format!("molo17/gluesync-chronos:{chronos}")
        );
        // Every pipeline this update paused is out of maintenance mode again, and none was paused twice.
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(
            sim.in_maintenance(),
            ["kept-in-maintenance-00020"],
            "killed during {killed_at:?}"
        );
        assert_eq!(
            attempt.paused_pipelines.len(),
            20,
            "killed during {killed_at:?}"
        );
        assert_eq!(
            attempt.resumed_pipelines.len(),
            20,
            "killed during {killed_at:?}"
        );
        assert!(status.paused_pipelines.is_empty());
        assert_eq!(
            sim.calls().enter_while_in_maintenance,
            0,
            "a paused pipeline was asked to pause again"
        );
    }
    gko.kill()?;
    let _ = gko.wait();
    Ok(())
}
