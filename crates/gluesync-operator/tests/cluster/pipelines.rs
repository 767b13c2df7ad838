//! Never lose a pipeline: the update at its worst moments, with 1,000 pipelines. Each test first proves
//! its fault landed where it says (the step, the call), then that every pipeline that was running is out
//! of maintenance mode again, `status.pausedPipelines` is empty, and status and events say what happened.

use crate::common;

use std::time::Duration;

use common::*;
use gko_test_support::{FaultProxy, eventually};
use gluesync_operator::api::{UpdateResult, UpdateStep};
use gluesync_simulator::{CatalogEntry, Options, Simulator};
use kube::ResourceExt;
use serde_json::json;

const PIPELINES: usize = 1000;

/// A simulator with 1,000 running pipelines and a catalog that offers Core Hub 2.3.2.2.
async fn simulator_with_many() -> anyhow::Result<Simulator> {
    let sim = Simulator::start(Options::default()).await?;
    sim.add_pipelines("p", PIPELINES);
    sim.set_catalog("gluesync-core-hub", CatalogEntry::all("2.3.2.2"));
    sim.set_catalog("gluesync-chronos", CatalogEntry::all("0.3.2"));
    Ok(sim)
}

/// Waits until Core Hub lists no pipeline in maintenance mode and the ledger is empty.
async fn wait_all_running(
    ns: &gko_test_support::TestNamespace,
    sim: &Simulator,
) -> anyhow::Result<()> {
    eventually(
        "every pipeline running and status.pausedPipelines empty",
        Duration::from_secs(120),
        || async {
            let g = platforms(ns).get_opt("gluesync").await?;
            let ledger_empty = g.is_none_or(|g| {
                g.status
                    .as_ref()
                    .is_none_or(|s| s.paused_pipelines.is_empty())
            });
            let paused = sim.in_maintenance().len();
            Ok((ledger_empty && paused == 0).then_some(()))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_applied_late_after_a_drain_timeout_is_undone() -> anyhow::Result<()> {
    let ns = namespace("late-maintenance").await?;
    let sim = simulator_with_many().await?;
    install_with_simulator(&ns, &sim, json!({"drainTimeoutSeconds": 5}))?;
    let _gko = Operator::start(&ns);
    wait_settled(&ns).await?;

    // Core Hub accepts each maintenance request and applies it 8 s later.
    sim.update_faults(|f| f.maintenance_delay_ms = 8000);
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let g = wait_for_platform(&ns, "the drain to give up", |g| {
        g.status
            .as_ref()
            .is_some_and(|s| s.late_maintenance.is_some())
    })
    .await?;
    // The fault landed: the drain gave up with every enter accepted and none applied yet.
    let late = g.status.unwrap_or_default().late_maintenance.unwrap();
    assert_eq!(late.pipelines.len(), PIPELINES);
    assert_eq!(sim.calls().enter.len(), PIPELINES);
    assert!(sim.in_maintenance().len() < PIPELINES);

    let g = wait_finished(&ns, 2).await?;
    let attempt = g.status.clone().unwrap_or_default().last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Refused, "{attempt:?}");
    // The late enters land after the update ended; GKO takes every one out again.
    eventually(
        "the late enters to land",
        Duration::from_secs(30),
        || async { Ok((!sim.in_maintenance().is_empty()).then_some(())) },
    )
    .await?;
    wait_all_running(&ns, &sim).await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(sim.in_maintenance().len(), 0, "nothing lands later still");
    let calls = sim.calls();
    assert!(
        calls.enter.values().all(|n| *n == 1),
        "each pipeline asked in once"
    );
    assert!(calls.exit.len() == PIPELINES);
    let reasons = event_reasons_through(&ns, "UpdateRefused").await?;
    assert!(reasons.iter().any(|r| r == "DrainTimeout"), "{reasons:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_hub_down_for_20_s_during_resume() -> anyhow::Result<()> {
    let ns = namespace("down-in-resume").await?;
    let sim = simulator_with_many().await?;
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 3}))?;
    let _gko = Operator::start(&ns);
    wait_settled(&ns).await?;

    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    wait_for_step(&ns, UpdateStep::CoreHub).await?;
    assert_eq!(sim.in_maintenance().len(), PIPELINES);
    sim.update_faults(|f| f.down = true);
    let g = wait_for_message(&ns, UpdateStep::Resume, "cannot be reached").await?;
    // The fault landed: Core Hub is down while every pipeline waits to resume.
    assert_eq!(
        g.status.unwrap_or_default().paused_pipelines.len(),
        PIPELINES
    );
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        sim.in_maintenance().len(),
        PIPELINES,
        "down: nothing resumed"
    );
    sim.update_faults(|f| f.down = false);

    let g = wait_finished(&ns, 2).await?;
    let attempt = g.status.clone().unwrap_or_default().last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    assert_eq!(attempt.resumed_pipelines.len(), PIPELINES);
    wait_all_running(&ns, &sim).await?;
    let reasons = event_reasons_through(&ns, "UpdateSucceeded").await?;
    assert!(
        reasons.iter().any(|r| r == "PipelinesResumed"),
        "{reasons:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_hub_answering_500_to_every_exit_for_30_s() -> anyhow::Result<()> {
    let ns = namespace("exit-500").await?;
    let sim = simulator_with_many().await?;
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 3}))?;
    let _gko = Operator::start(&ns);
    wait_settled(&ns).await?;

    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    wait_for_step(&ns, UpdateStep::CoreHub).await?;
    sim.update_faults(|f| {
        f.error_contains = "/commands/maintenance/exit".into();
        f.error_count = u32::MAX;
    });
    let g = wait_for_message(&ns, UpdateStep::Resume, "500").await?;
    // The fault landed: Resume reports Core Hub's 500 to its exits (the refused ones are not counted as
    // exits by the simulator), and no pipeline left maintenance mode.
    assert_eq!(
        g.status.unwrap_or_default().paused_pipelines.len(),
        PIPELINES
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(sim.in_maintenance().len(), PIPELINES);
    sim.update_faults(|f| {
        f.error_contains.clear();
        f.error_count = 0;
    });

    let g = wait_finished(&ns, 2).await?;
    let attempt = g.status.clone().unwrap_or_default().last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    wait_all_running(&ns, &sim).await?;
    Ok(())
}

/// Waits until the update is at `step` and its message contains `text`.
async fn wait_for_message(
    ns: &gko_test_support::TestNamespace,
    step: UpdateStep,
    text: &str,
) -> anyhow::Result<gluesync_operator::api::GluesyncPlatform> {
    wait_for_platform(ns, &format!("{step:?} saying {text:?}"), |g| {
        step_of(g) == Some(step)
            && g.status
                .as_ref()
                .and_then(|s| s.message.as_deref())
                .is_some_and(|m| m.contains(text))
    })
    .await
}

/// Deletes the GluesyncPlatform as Argo CD's prune or `kubectl delete` would, and waits until it is gone.
async fn delete_and_wait_gone(ns: &gko_test_support::TestNamespace) -> anyhow::Result<()> {
    ns.kubectl(&["delete", "gsp", "gluesync", "--wait=false"])?;
    eventually(
        "the GluesyncPlatform to go",
        Duration::from_secs(120),
        || async {
            Ok(platforms(ns)
                .get_opt("gluesync")
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_platform_during_drain_resumes_every_pipeline() -> anyhow::Result<()> {
    let ns = namespace("delete-drain").await?;
    let sim = simulator_with_many().await?;
    // The requests the drain sent that have not landed are watched for max(drainTimeoutSeconds, 60) s
    // after the deletion: the resource goes once each landed and was taken out, or the watch ended.
    install_with_simulator(&ns, &sim, json!({"drainTimeoutSeconds": 30}))?;
    let _gko = Operator::start(&ns);
    wait_settled(&ns).await?;

    sim.update_faults(|f| f.maintenance_delay_ms = 3000);
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let g = wait_for_platform(&ns, "Drain with pipelines asked in", |g| {
        step_of(g) == Some(UpdateStep::Drain)
            && g.status
                .as_ref()
                .is_some_and(|s| s.paused_pipelines.len() == PIPELINES)
    })
    .await?;
    assert!(
        g.finalizers()
            .iter()
            .any(|f| f == gluesync_operator::api::FINALIZER),
        "the finalizer is on before anything is paused"
    );
    eventually("enters to be sent", Duration::from_secs(30), || async {
        Ok((sim.calls().enter.len() == PIPELINES).then_some(()))
    })
    .await?;
    delete_and_wait_gone(&ns).await?;
    // Every exit was sent after its enter; with the same delay, each lands after it.
    eventually(
        "every pipeline running",
        Duration::from_secs(30),
        || async { Ok(sim.in_maintenance().is_empty().then_some(())) },
    )
    .await?;
    // Events follow the status writes that cause them: waited for, not read once.
    event_reasons_through(&ns, "UpdateCancelled").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_platform_during_core_hub_puts_it_back_and_resumes() -> anyhow::Result<()> {
    let ns = namespace("delete-corehub").await?;
    let sim = simulator_with_many().await?;
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 30}))?;
    let _gko = Operator::start(&ns);
    wait_settled(&ns).await?;

    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    wait_for_step(&ns, UpdateStep::CoreHub).await?;
    eventually(
        "the new Core Hub image",
        Duration::from_secs(30),
        || async {
            let image = image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?;
            Ok((image == "molo17/gluesync-core-hub:2.3.2.2").then_some(()))
        },
    )
    .await?;
    assert_eq!(sim.in_maintenance().len(), PIPELINES);
    delete_and_wait_gone(&ns).await?;
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        "molo17/gluesync-core-hub:2.3.2.1",
        "the half-made change is put back"
    );
    wait_all_running(&ns, &sim).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_gone_for_5_s_during_drain() -> anyhow::Result<()> {
    let ns = namespace("apiserver-drain").await?;
    let sim = simulator_with_many().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    let proxy = FaultProxy::in_front_of(ns.cp)?;
    let _gko = Gko::spawn(
        &ns,
        GkoOptions {
            kubeconfig: Some(proxy.kubeconfig(ns.cp)?),
            ..Default::default()
        },
    )?;
    wait_settled(&ns).await?;

    sim.update_faults(|f| f.maintenance_delay_ms = 3000);
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    wait_for_step(&ns, UpdateStep::Drain).await?;
    let refused = proxy.refused();
    proxy.down_for(Duration::from_secs(5));
    tokio::time::sleep(Duration::from_secs(5)).await;
    // The fault landed: GKO tried to reach the API server while it was gone.
    assert!(
        proxy.refused() > refused,
        "GKO did not try while the API server was gone"
    );

    let g = wait_finished(&ns, 2).await?;
    let attempt = g.status.clone().unwrap_or_default().last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    assert_eq!(g.status.unwrap_or_default().history.len(), 1);
    wait_all_running(&ns, &sim).await?;
    assert!(sim.calls().enter.values().all(|n| *n == 1));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_hub_answer_without_the_maintenance_field_is_never_read_as_running()
-> anyhow::Result<()> {
    let ns = namespace("missing-field").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 3}))?;
    let _gko = Operator::start(&ns);
    wait_settled(&ns).await?;

    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    wait_for_step(&ns, UpdateStep::CoreHub).await?;
    // A Core Hub that renamed the field: its lists say nothing of maintenance mode.
    sim.update_faults(|f| f.omit_maintenance_field = true);
    wait_for_message(&ns, UpdateStep::Resume, "isInMaintenanceMode").await?;
    // The fault landed, and nothing was taken for "running": the ledger holds every pipeline although
    // Core Hub already runs them again (the exits went through).
    eventually(
        "the exits to be applied",
        Duration::from_secs(30),
        || async { Ok((sim.in_maintenance() == ["kept-in-maintenance-00020"]).then_some(())) },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let g = platforms(&ns).get("gluesync").await?;
    assert_eq!(step_of(&g), Some(UpdateStep::Resume));
    assert_eq!(g.status.unwrap_or_default().paused_pipelines.len(), 20);
    sim.update_faults(|f| f.omit_maintenance_field = false);
    let g = wait_finished(&ns, 2).await?;
    let status = g.status.unwrap_or_default();
    assert_eq!(status.last_attempt.unwrap().result, UpdateResult::Succeeded);
    assert!(status.paused_pipelines.is_empty());
    Ok(())
}
