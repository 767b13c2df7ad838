//! GKO killed (SIGKILL) at each step of an update, CoreHubRollback included, exactly between the status
//! write that enters the step and the actions and Core Hub calls that follow it (the fault point
//! `GKO_PAUSE_AFTER_STATUS_WRITE`, which the test sees hit before it kills; for a step GKO passes through
//! without writing it, the first write past it), then started again: every
//! update ends as it would have without the kill, each pipeline is asked to enter maintenance mode once
//! per update, nothing is left paused, and history holds one entry per update.

use crate::common;

use std::time::Duration;

use common::*;
use gluesync_operator::api::{UpdateResult, UpdateStep};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_survives_gko_killed_right_after_each_status_write() -> anyhow::Result<()> {
    let ns = namespace("restart").await?;
    let sim = simulator().await?;
    sim.update_faults(|f| f.maintenance_delay_ms = 200);
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 2}))?;
    let mut gko = Gko::spawn(&ns, GkoOptions::default())?;
    wait_settled(&ns).await?;

    let steps = [
        UpdateStep::Preflight,
        UpdateStep::Snapshot,
        UpdateStep::PrePull,
        UpdateStep::Drain,
        UpdateStep::CoreHub,
        UpdateStep::CoreHubRollback,
        UpdateStep::Resume,
        UpdateStep::Modules,
        UpdateStep::Finish,
    ];
    let api = platforms(&ns);
    let mut running_version = "2.3.2.1";
    for (i, step) in steps.into_iter().enumerate() {
        // A rollback needs a Core Hub that fails; the other steps a clean update back and forth.
        let rollback = step == UpdateStep::CoreHubRollback;
        let (version, chronos) = match (rollback, running_version) {
            (true, v) => (
                "2.3.2.2-crash",
                if v == "2.3.2.1" { "0.3.2" } else { "0.3.3" },
            ),
            (false, "2.3.2.1") => ("2.3.2.2", "0.3.3"),
            (false, _) => ("2.3.2.1", "0.3.2"),
        };
        let before = api.get("gluesync").await?;
        let history = before.status.as_ref().map_or(0, |s| s.history.len());
        let generation = before.metadata.generation.unwrap_or(0) + 1;

        // Restart GKO with the fault point armed for this step.
        gko.terminate()?;
        gko = Gko::spawn(
            &ns,
            GkoOptions {
                env: vec![("GKO_PAUSE_AFTER_STATUS_WRITE".into(), format!("{step:?}"))],
                ..Default::default()
            },
        )?;
        patch_spec(
            &ns,
            json!({"version": version, "modules": {"gluesync-gluesync-chronos": chronos}}),
        )
        .await?;
        gko.wait_for_line("fault point hit", Duration::from_secs(120))
            .await?;
        // The fault landed where it says: the status names the step (or, for a step passed through
        // without a write of its own, a later one, or the end of the update), and GKO stopped there.
        let g = api.get("gluesync").await?;
        let at = step_of(&g);
        assert!(
            at.is_none_or(|s| s >= step),
            "update {i}: armed at {step:?}, stopped at {at:?}"
        );
        if matches!(
            step,
            UpdateStep::Drain | UpdateStep::CoreHub | UpdateStep::CoreHubRollback
        ) {
            // Each of these writes before it acts: its own write is the fault point. (PrePull makes
            // only what needs no status, its pods and GKO's finalizer: a pull that ends at once, as
            // kwok's do, is passed through; tests/cluster/prepull.rs kills GKO in a pull that takes 20 s.)
            assert_eq!(at, Some(step), "update {i}");
        }
        gko.kill()?;
        println!(
            "killed GKO right after the status write entering {step:?} (the status says {at:?})"
        );
        gko = Gko::spawn(&ns, GkoOptions::default())?;

        let g = wait_finished(&ns, generation).await?;
        let status = g.status.unwrap_or_default();
        let attempt = status.last_attempt.clone().unwrap();
        let expected = if rollback {
            UpdateResult::Failed
        } else {
            UpdateResult::Succeeded
        };
        assert_eq!(attempt.result, expected, "killed at {step:?}: {attempt:?}");
        assert_eq!(
            status.history.len(),
            (history + 1).min(10),
            "killed at {step:?}: one history entry"
        );
        if !rollback {
            running_version = version;
        }
        assert_eq!(
            status.version.as_deref(),
            Some(running_version),
            "killed at {step:?}"
        );
        assert_eq!(
            image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
            format!("molo17/gluesync-core-hub:{running_version}"),
            "killed at {step:?}"
        );
        // Every pipeline this update paused is out of maintenance mode again; each was asked in once.
        // Every update here changes Core Hub, so each drains.
        let drained_updates = i as u32 + 1;
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(
            sim.in_maintenance(),
            ["kept-in-maintenance-00020"],
            "killed at {step:?}"
        );
        assert_eq!(attempt.paused_pipelines.len(), 20, "killed at {step:?}");
        assert_eq!(attempt.resumed_pipelines.len(), 20, "killed at {step:?}");
        assert!(status.paused_pipelines.is_empty());
        let calls = sim.calls();
        assert!(
            calls.enter.values().all(|n| *n == drained_updates),
            "killed at {step:?}: each pipeline asked in once per update: {:?}",
            calls.enter
        );
        assert_eq!(
            calls.enter_while_in_maintenance, 0,
            "a paused pipeline was asked to pause again"
        );
    }
    Ok(())
}

/// A GKO that recorded the pipelines it asks in (`status.update.askedPipelines`) and stopped before
/// sending a single request: the GKO after it does not take the record for requests Core Hub got. It
/// asks each pipeline still running once, and the update drains in time instead of waiting out the
/// drain timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelines_recorded_as_asked_but_never_asked_are_asked_by_the_next_gko()
-> anyhow::Result<()> {
    let ns = namespace("restart-asked").await?;
    let sim = simulator().await?;
    install_with_simulator(
        &ns,
        &sim,
        json!({"stabilityWindowSeconds": 2, "drainTimeoutSeconds": 90}),
    )?;
    let mut gko = Gko::spawn(&ns, GkoOptions::default())?;
    wait_settled(&ns).await?;
    gko.terminate()?;

    let mut gko = Gko::spawn(
        &ns,
        GkoOptions {
            env: vec![("GKO_PAUSE_AFTER_STATUS_WRITE".into(), "Drain:Asked".into())],
            ..Default::default()
        },
    )?;
    let generation = platforms(&ns)
        .get("gluesync")
        .await?
        .metadata
        .generation
        .unwrap_or(0)
        + 1;
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    gko.wait_for_line("fault point hit", Duration::from_secs(120))
        .await?;
    // The fault landed where it says: every running pipeline recorded as asked, none asked.
    let g = platforms(&ns).get("gluesync").await?;
    assert_eq!(step_of(&g), Some(UpdateStep::Drain));
    let recorded = g.status.as_ref().and_then(|s| s.update.as_ref()).unwrap();
    assert_eq!(
        recorded.step.asked_pipelines().map_or(0, |l| l.len()),
        20,
        "{recorded:?}"
    );
    gko.kill()?;
    assert!(sim.calls().enter.is_empty(), "{:?}", sim.calls().enter);
    println!("killed GKO right after it recorded 20 pipelines as asked, before it asked them");

    let _gko = Gko::spawn(&ns, GkoOptions::default())?;
    let g = wait_finished(&ns, generation).await?;
    let status = g.status.unwrap_or_default();
    let attempt = status.last_attempt.clone().unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    assert_eq!(attempt.paused_pipelines.len(), 20);
    let calls = sim.calls();
    assert_eq!(calls.enter.len(), 20, "{:?}", calls.enter);
    assert!(
        calls.enter.values().all(|n| *n == 1),
        "each asked once: {:?}",
        calls.enter
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(sim.in_maintenance(), ["kept-in-maintenance-00020"]);
    Ok(())
}
