//! Cluster tests of the update engine, with the Core Hub simulator.

use crate::common;

use std::time::Duration;

use common::*;
use gluesync_operator::api::{ComponentResultStatus, Phase, UpdateResult};
use serde_json::json;

fn finished(g: &gluesync_operator::api::GluesyncPlatform, generation_at_least: i64) -> bool {
    g.status.as_ref().is_some_and(|s| {
        s.update.is_none()
            && s.last_attempt
                .as_ref()
                .is_some_and(|a| a.generation.unwrap_or(0) >= generation_at_least)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_update_pauses_updates_and_resumes() -> anyhow::Result<()> {
    let ns = namespace("clean-update").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    let gko = Operator::start_with_role(&ns).await?;
    let g = wait_settled(&ns).await?;
    assert!(
        g.status.unwrap_or_default().last_attempt.is_none(),
        "no update ran yet"
    );

    // Record every image change of the StatefulSets, in the order the API server makes them.
    let changes = image_changes(&ns);
    tokio::time::sleep(Duration::from_millis(300)).await;
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    wait_for_platform(&ns, "phase Updating", |g| {
        g.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(Phase::Updating))
    })
    .await?;
    let g = wait_for_platform(&ns, "the update to finish", |g| finished(g, 2)).await?;
    let status = g.status.clone().unwrap_or_default();
    let attempt = status.last_attempt.clone().unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    assert_eq!(attempt.message, "update finished");
    assert_eq!(attempt.target.as_deref(), Some("2.3.2.2"));
    assert_eq!(status.phase, Some(Phase::Current));
    assert_eq!(status.version.as_deref(), Some("2.3.2.2"));

    let results: Vec<_> = attempt
        .results
        .iter()
        .map(|r| {
            (
                r.name.as_str(),
                r.status,
                r.from.as_deref(),
                r.to.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        results,
        [
            (
                "gluesync-gluesync-core-hub",
                ComponentResultStatus::Ok,
                Some("2.3.2.1"),
                Some("2.3.2.2")
            ),
            (
                "gluesync-gluesync-chronos",
                ComponentResultStatus::Ok,
                Some("0.3.2"),
                Some("0.3.3")
            ),
            (
                "gluesync-gluesync-grafana",
                ComponentResultStatus::Skipped,
                Some("11.2.0"),
                None
            ),
            (
                "gluesync-gluesync-prometheus",
                ComponentResultStatus::Skipped,
                Some("2.53.0"),
                None
            ),
        ]
    );
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        "molo17/gluesync-core-hub:2.3.2.2"
    );
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-chronos").await?,
        "molo17/gluesync-chronos:0.3.3"
    );

    // Every running pipeline was paused once and resumed once; the one already in maintenance stayed.
    assert_eq!(attempt.paused_pipelines.len(), 20);
    assert_eq!(attempt.paused_pipelines, attempt.resumed_pipelines);
    assert!(
        !attempt
            .paused_pipelines
            .iter()
            .any(|p| p.starts_with("kept"))
    );
    assert_eq!(sim.in_maintenance(), ["kept-in-maintenance-00020"]);
    let calls = sim.calls();
    assert_eq!(calls.enter.len(), 20);
    assert!(calls.enter.values().all(|n| *n == 1), "{:?}", calls.enter);
    assert!(calls.exit.values().all(|n| *n == 1), "{:?}", calls.exit);
    assert!(!calls.exit.contains_key("kept-in-maintenance-00020"));
    assert!(status.paused_pipelines.is_empty());

    assert_eq!(status.history.len(), 1);
    let h = &status.history[0];
    assert_eq!(
        (h.from.as_deref(), h.to.as_deref(), h.result),
        (Some("2.3.2.1"), Some("2.3.2.2"), UpdateResult::Succeeded)
    );
    assert_eq!(
        h.previous_images
            .get("gluesync-gluesync-core-hub")
            .map(String::as_str),
        Some("molo17/gluesync-core-hub:2.3.2.1")
    );

    // Core Hub first, then the modules.
    let seen = changes.lock().map(|c| c.clone()).unwrap_or_default();
    assert_eq!(
        seen,
        [
            (
                "gluesync-gluesync-core-hub".to_string(),
                "molo17/gluesync-core-hub:2.3.2.2".to_string()
            ),
            (
                "gluesync-gluesync-chronos".to_string(),
                "molo17/gluesync-chronos:0.3.3".to_string()
            ),
        ]
    );

    let reasons = event_reasons_through(&ns, "UpdateSucceeded").await?;
    assert_eq!(
        reasons,
        [
            "UpdateStarted",
            "ImagesPrePulled",
            "PipelinesPaused",
            "CoreHubPatched",
            "CoreHubUpdated",
            "PipelinesResumed",
            "UpdateSucceeded"
        ]
    );

    // Nothing more happens: the update ran once.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let again = platforms(&ns).get("gluesync").await?;
    assert_eq!(again.status.unwrap_or_default().history.len(), 1);
    let metrics = gko.metrics.render();
    assert!(
        metrics.contains(r#"gluesync_operator_updates_total{result="Succeeded"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"gluesync_operator_update_step_duration_seconds_count{step="Drain"} 1"#),
        "{metrics}"
    );
    assert_eq!(
        gko.metrics.reconcile_errors.get(),
        0,
        "GKO lacked a right or failed"
    );
    Ok(())
}

/// An update with nothing to wait for (stability window 0, Core Hub answering at once, no module to
/// change) writes the statuses crash safety needs, each before what it leads to, and little more: Drain
/// with the pipelines it asks (before they are asked), CoreHub (before its image changes) and the end.
/// Preflight and Snapshot change nothing and pass through; PrePull writes its status, with the pulls it
/// lists, before it makes their pods (GKO's admission policies read them there), and puts GKO's finalizer
/// on with them: every status from the drain on is written with the finalizer on. Its events are
/// recorded all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_update_writes_only_the_statuses_crash_safety_needs() -> anyhow::Result<()> {
    use gluesync_operator::api::UpdateStep;
    let ns = namespace("few-writes").await?;
    let sim = simulator().await?;
    install_with_simulator(
        &ns,
        &sim,
        json!({"stabilityWindowSeconds": 0, "catalog": {"offline": true, "url": null}}),
    )?;
    let gko = Operator::start_with_role(&ns).await?;
    wait_settled(&ns).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seen = status_versions(&ns);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = gko.metrics.status_writes.get();
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let g = wait_for_platform(&ns, "the update to finish", |g| finished(g, 2)).await?;
    let attempt = g.status.and_then(|s| s.last_attempt).unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    assert_eq!(attempt.paused_pipelines.len(), 20, "{attempt:?}");
    let writes = gko.metrics.status_writes.get() - before;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = seen.lock().map(|v| v.clone()).unwrap_or_default();
    // Each write crash safety needs is there, as the API server holds it.
    for wanted in [
        (Some(UpdateStep::Drain), true),
        (Some(UpdateStep::CoreHub), false),
        (None, false),
    ] {
        assert!(
            seen.iter()
                .any(|(step, asked, _)| (*step, *asked) == wanted),
            "no status {wanted:?} in {seen:?}"
        );
    }
    // PrePull's status lists the pulls before their pods are made; GKO's finalizer goes on with them,
    // before the drain's status, which asks the pipelines.
    assert!(
        seen.iter()
            .any(|(step, _, _)| *step == Some(UpdateStep::PrePull)),
        "no PrePull status before the pods: {seen:?}"
    );
    assert!(
        seen.iter().all(|(step, _, finalizer)| {
            matches!(step, None | Some(UpdateStep::PrePull)) || *finalizer
        }),
        "a status of the drain or after written before GKO's finalizer was on: {seen:?}"
    );
    assert!(
        !seen
            .iter()
            .any(|(step, _, _)| *step == Some(UpdateStep::Snapshot)),
        "Snapshot changes nothing and has no status of its own: {seen:?}"
    );
    println!("{writes} status writes in the update: {seen:?}");
    // A wait over 100 ms on a loaded machine (the rollout, Core Hub's answers) may show as one more.
    assert!(
        (3..=7).contains(&writes),
        "{writes} status writes in the update: {seen:?}"
    );
    let reasons = event_reasons_through(&ns, "UpdateSucceeded").await?;
    for reason in ["UpdateStarted", "CoreHubPatched", "UpdateSucceeded"] {
        assert!(reasons.iter().any(|r| r == reason), "{reason}: {reasons:?}");
    }
    Ok(())
}

/// A status as [`status_versions`] records it: the update's step, whether it asked pipelines, and
/// whether GKO's finalizer was on the platform that held it.
type Written = (Option<gluesync_operator::api::UpdateStep>, bool, bool);

/// Every status the API server holds of the platform from now on, as (step, pipelines asked): one entry
/// per version whose status changed.
fn status_versions(
    ns: &gko_test_support::TestNamespace,
) -> std::sync::Arc<std::sync::Mutex<Vec<Written>>> {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = out.clone();
    let api = platforms(ns);
    tokio::spawn(async move {
        let mut last = None;
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = stream.next().await {
            let (watcher::Event::Apply(g) | watcher::Event::InitApply(g)) = event else {
                continue;
            };
            let first = last.is_none();
            if last.as_ref() == Some(&g.status) {
                continue;
            }
            last = Some(g.status.clone());
            if first {
                continue;
            }
            let u = g.status.as_ref().and_then(|s| s.update.as_ref());
            let entry = (
                u.map(|u| u.step.name()),
                u.and_then(|u| u.step.asked_pipelines())
                    .is_some_and(|l| !l.is_empty()),
                g.metadata
                    .finalizers
                    .iter()
                    .flatten()
                    .any(|f| f == gluesync_operator::api::FINALIZER),
            );
            if let Ok(mut v) = sink.lock() {
                v.push(entry);
            }
        }
    });
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashing_core_hub_is_rolled_back() -> anyhow::Result<()> {
    let ns = namespace("crash").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    let gko = Operator::start(&ns);
    wait_settled(&ns).await?;

    patch_spec(&ns, json!({"version": "2.3.2.2-crash"})).await?;
    let g = wait_for_platform(&ns, "the update to finish", |g| finished(g, 2)).await?;
    let status = g.status.unwrap_or_default();
    let attempt = status.last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Failed, "{attempt:?}");
    assert!(
        attempt.message.contains("CrashLoopBackOff"),
        "{}",
        attempt.message
    );
    assert_eq!(status.phase, Some(Phase::Failed));
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        "molo17/gluesync-core-hub:2.3.2.1"
    );
    let core = attempt
        .results
        .iter()
        .find(|r| r.name == "gluesync-gluesync-core-hub")
        .unwrap();
    assert_eq!(core.status, ComponentResultStatus::RolledBack);
    // Modules are not touched after a Core Hub failure; pipelines are resumed all the same.
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-chronos").await?,
        "molo17/gluesync-chronos:0.3.2"
    );
    assert_eq!(sim.in_maintenance(), ["kept-in-maintenance-00020"]);
    assert_eq!(attempt.resumed_pipelines.len(), 20);
    let reasons = event_reasons_through(&ns, "UpdateFailed").await?;
    assert_eq!(
        reasons,
        [
            "UpdateStarted",
            "ImagesPrePulled",
            "PipelinesPaused",
            "CoreHubPatched",
            "CoreHubFailed",
            "PipelinesResumed",
            "UpdateFailed"
        ]
    );
    // The state gauges an alert reads: phase Failed, Stalled, nothing paused, no update running, and the
    // update counted by its result.
    let metrics = gko.metrics.render();
    let value = |name: &str| {
        metrics.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse::<f64>()
                .ok()
        })
    };
    assert_eq!(
        value("gluesync_operator_phase{value=\"Failed\"}"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        value("gluesync_operator_phase{value=\"Current\"}"),
        Some(0.0)
    );
    assert_eq!(
        value("gluesync_operator_condition{value=\"Stalled\"}"),
        Some(1.0)
    );
    assert_eq!(
        value("gluesync_operator_condition{value=\"Ready\"}"),
        Some(0.0)
    );
    assert_eq!(value("gluesync_operator_paused_pipelines"), Some(0.0));
    assert_eq!(value("gluesync_operator_update_running"), Some(0.0));
    assert_eq!(
        value("gluesync_operator_updates_total{result=\"Failed\"}"),
        Some(1.0)
    );
    assert!(
        value("gluesync_operator_catalog_last_success_timestamp_seconds")
            .is_some_and(|t| t > 1.7e9),
        "{metrics}"
    );
    // Core Hub runs again on its previous version, ready.
    wait_for_platform(&ns, "Core Hub ready on 2.3.2.1", |g| {
        g.status.as_ref().is_some_and(|s| {
            s.components.iter().any(|c| {
                c.name == "gluesync-gluesync-core-hub"
                    && c.ready
                    && c.version.as_deref() == Some("2.3.2.1")
            })
        })
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unpullable_core_hub_fails_without_waiting_for_the_timeout() -> anyhow::Result<()> {
    let ns = namespace("unpullable").await?;
    let sim = simulator().await?;
    // A stability timeout far longer than the test's patience: only failing fast can pass. Without the
    // pre-pull (which refuses such an update before anything is paused, tests/cluster/prepull.rs), the stability
    // check is what meets the image.
    install_with_simulator(
        &ns,
        &sim,
        json!({"stabilityTimeoutSeconds": 3600, "prePull": {"enabled": false}}),
    )?;
    let _gko = Operator::start(&ns);
    wait_settled(&ns).await?;
    patch_spec(&ns, json!({"version": "2.3.2.2-unpullable"})).await?;
    let g = wait_for_platform(&ns, "the update to finish", |g| finished(g, 2)).await?;
    let status = g.status.unwrap_or_default();
    let attempt = status.last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Failed);
    assert!(
        attempt.message.contains("ImagePullBackOff"),
        "{}",
        attempt.message
    );
    assert_eq!(status.phase, Some(Phase::Failed));
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        "molo17/gluesync-core-hub:2.3.2.1"
    );
    assert_eq!(sim.in_maintenance(), ["kept-in-maintenance-00020"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashing_module_is_rolled_back_and_the_others_updated() -> anyhow::Result<()> {
    let ns = namespace("module-crash").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    let _gko = Operator::start(&ns);
    wait_settled(&ns).await?;
    patch_spec(
        &ns,
        json!({"modules": {"gluesync-gluesync-chronos": "0.3.3-crash", "gluesync-gluesync-grafana": "11.3.0"}}),
    )
    .await?;
    let g = wait_for_platform(&ns, "the update to finish", |g| finished(g, 2)).await?;
    let status = g.status.unwrap_or_default();
    let attempt = status.last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Degraded, "{attempt:?}");
    assert_eq!(status.phase, Some(Phase::Degraded));
    assert!(
        attempt
            .message
            .contains("gluesync-gluesync-chronos rolled back"),
        "{}",
        attempt.message
    );
    let by_name = |n: &str| {
        attempt
            .results
            .iter()
            .find(|r| r.name == n)
            .map(|r| r.status)
    };
    assert_eq!(
        by_name("gluesync-gluesync-chronos"),
        Some(ComponentResultStatus::RolledBack)
    );
    assert_eq!(
        by_name("gluesync-gluesync-grafana"),
        Some(ComponentResultStatus::Ok)
    );
    assert_eq!(
        by_name("gluesync-gluesync-core-hub"),
        Some(ComponentResultStatus::Skipped)
    );
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-chronos").await?,
        "molo17/gluesync-chronos:0.3.2"
    );
    assert_eq!(
        image_of(&ns, "deployment", "gluesync-gluesync-grafana").await?,
        "molo17/grafana:11.3.0"
    );
    // Modules only: Core Hub stayed, and no pipeline was paused.
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        "molo17/gluesync-core-hub:2.3.2.1"
    );
    assert!(sim.calls().enter.is_empty());
    assert_eq!(
        status.history[0].to, None,
        "to is empty for an update of modules only"
    );
    let reasons = event_reasons_through(&ns, "UpdateDegraded").await?;
    assert_eq!(
        reasons,
        ["UpdateStarted", "ModuleRolledBack", "UpdateDegraded"]
    );
    // Degraded stays: the rolled-back module is not tried again by itself.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = platforms(&ns)
        .get("gluesync")
        .await?
        .status
        .unwrap_or_default();
    assert_eq!(again.phase, Some(Phase::Degraded));
    assert_eq!(again.history.len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_that_never_pauses_refuses_the_update() -> anyhow::Result<()> {
    let ns = namespace("drain-timeout").await?;
    let sim = simulator().await?;
    sim.update_faults(|f| {
        f.stuck.insert("p00003".into());
    });
    install_with_simulator(&ns, &sim, json!({"drainTimeoutSeconds": 3}))?;
    let _gko = Operator::start(&ns);
    // The catalog check runs in the background: wait until it has said 2.3.2.2 is available.
    wait_available(&ns).await?;
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let g = wait_for_platform(&ns, "the update to finish", |g| finished(g, 2)).await?;
    let status = g.status.unwrap_or_default();
    let attempt = status.last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Refused);
    assert!(attempt.message.contains("p00003"), "{}", attempt.message);
    assert_eq!(
        status.phase,
        Some(Phase::UpdateAvailable),
        "a Refused update leaves the phase as it was (2.3.2.2 is known and not running)"
    );
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        "molo17/gluesync-core-hub:2.3.2.1"
    );
    assert_eq!(
        sim.in_maintenance(),
        ["kept-in-maintenance-00020"],
        "the paused ones were resumed"
    );
    assert!(status.paused_pipelines.is_empty());
    let reasons = event_reasons_through(&ns, "UpdateRefused").await?;
    assert_eq!(
        reasons,
        [
            "UpdateStarted",
            "ImagesPrePulled",
            "PipelinesPaused",
            "DrainTimeout",
            "PipelinesResumed",
            "UpdateRefused"
        ]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_hub_answering_500_for_a_while_does_not_stop_the_update() -> anyhow::Result<()> {
    let ns = namespace("corehub-500").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 3}))?;
    let _gko = Operator::start(&ns);
    wait_settled(&ns).await?;
    // During Drain.
    sim.update_faults(|f| {
        f.error_count = 12;
        f.error_path = "/pipelines".into();
    });
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    wait_for_platform(&ns, "step CoreHub", |g| {
        g.status
            .as_ref()
            .and_then(|s| s.update.as_ref())
            .is_some_and(|u| u.step.name() == gluesync_operator::api::UpdateStep::CoreHub)
    })
    .await?;
    assert_eq!(
        sim.faults().error_count,
        0,
        "the 500s were answered during Drain"
    );
    // During Resume (Core Hub's stability window leaves time to set it up).
    sim.update_faults(|f| f.error_count = 12);
    let g = wait_for_platform(&ns, "the update to finish", |g| finished(g, 2)).await?;
    assert_eq!(
        sim.faults().error_count,
        0,
        "the 500s were answered during Resume"
    );
    let attempt = g.status.unwrap_or_default().last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    assert_eq!(attempt.resumed_pipelines.len(), 20);
    assert_eq!(sim.in_maintenance(), ["kept-in-maintenance-00020"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_request_id_retries_and_history_keeps_ten() -> anyhow::Result<()> {
    let ns = namespace("retry").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 0}))?;
    let _gko = Operator::start(&ns);
    wait_settled(&ns).await?;
    patch_spec(&ns, json!({"version": "2.3.2.2-crash"})).await?;
    let g = wait_for_platform(&ns, "the failed update", |g| finished(g, 2)).await?;
    assert_eq!(g.status.unwrap_or_default().phase, Some(Phase::Failed));
    // Failed stays until the spec changes; a new requestID retries the same versions.
    patch_spec(&ns, json!({"requestID": "retry-1"})).await?;
    let g = wait_for_platform(&ns, "the retried update", |g| finished(g, 3)).await?;
    let status = g.status.unwrap_or_default();
    assert_eq!(status.history.len(), 2);
    assert_eq!(
        status
            .last_attempt
            .as_ref()
            .and_then(|a| a.request_id.as_deref()),
        Some("retry-1")
    );
    assert_eq!(status.history[0].request_id.as_deref(), Some("retry-1"));

    // Ten more updates: history keeps the newest ten.
    for (i, version) in ["2.3.2.2", "2.3.2.1"].iter().cycle().take(10).enumerate() {
        let generation = platforms(&ns)
            .get("gluesync")
            .await?
            .metadata
            .generation
            .unwrap_or(0);
        patch_spec(
            &ns,
            json!({"version": version, "requestID": format!("r{i}")}),
        )
        .await?;
        wait_for_platform(&ns, "an update", |g| finished(g, generation + 1)).await?;
    }
    let status = platforms(&ns)
        .get("gluesync")
        .await?
        .status
        .unwrap_or_default();
    assert_eq!(status.history.len(), 10);
    assert_eq!(status.history[0].request_id.as_deref(), Some("r9"));
    assert_eq!(status.history[9].request_id.as_deref(), Some("r0"));
    assert!(
        status
            .history
            .iter()
            .all(|h| h.result == UpdateResult::Succeeded)
    );
    // Each update's events say what that update did, not what the first one with the same reason did.
    use k8s_openapi::api::events::v1::Event;
    let notes: Vec<String> = kube::Api::<Event>::namespaced(ns.client.clone(), &ns.name)
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("CoreHubPatched"))
        .filter_map(|e| e.note)
        .collect();
    for image in [
        "gluesync-core-hub:2.3.2.2-crash",
        "gluesync-core-hub:2.3.2.2 ",
        "gluesync-core-hub:2.3.2.1 ",
    ] {
        assert!(
            notes.iter().any(|n| format!("{n} ").contains(image)),
            "an event names {image}: {notes:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gko_at_once_still_make_one_update() -> anyhow::Result<()> {
    let ns = namespace("two-gko").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    // Until leader election comes, two processes may act at once; the status's resourceVersion
    // precondition keeps them from carrying out the same decision twice.
    let first = Operator::start(&ns);
    let second = Operator::start(&ns);
    wait_settled(&ns).await?;
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let g = wait_for_platform(&ns, "the update to finish", |g| finished(g, 2)).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let status = platforms(&ns)
        .get("gluesync")
        .await?
        .status
        .unwrap_or_default();
    assert_eq!(status.history.len(), 1, "one history entry");
    let attempt = g.status.unwrap_or_default().last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    assert_eq!(attempt.resumed_pipelines.len(), 20);
    assert_eq!(sim.in_maintenance(), ["kept-in-maintenance-00020"]);
    assert_eq!(
        event_reasons_through(&ns, "UpdateSucceeded")
            .await?
            .iter()
            .filter(|r| *r == "UpdateSucceeded")
            .count(),
        1
    );
    drop((first, second));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_hub_that_restarts_once_while_warming_up_passes_its_stability_check()
-> anyhow::Result<()> {
    let ns = namespace("restart-once").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 3}))?;
    let _gko = Operator::start(&ns);
    wait_settled(&ns).await?;
    let states = core_hub_pod_states(&ns);
    tokio::time::sleep(Duration::from_millis(300)).await;

    patch_spec(&ns, json!({"version": "2.3.2.2-restart-once"})).await?;
    let g = wait_for_platform(&ns, "the update to finish", |g| finished(g, 2)).await?;

    // The fault landed: the new pod was seen running, not ready, with its container restarted once,
    // and it is ready now with that restart still counted.
    let image = "molo17/gluesync-core-hub:2.3.2.2-restart-once";
    let seen = states.lock().map(|s| s.clone()).unwrap_or_default();
    assert!(
        seen.iter()
            .any(|(i, ready, restarts)| i == image && !ready && *restarts == 1),
        "the pod never restarted before it was ready: {seen:?}"
    );
    let restarts = ns.kubectl(&[
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=gluesync-gluesync-core-hub",
        "-o",
        "jsonpath={range .items[*]}{.spec.containers[0].image} {.status.containerStatuses[0].ready} \
         {.status.containerStatuses[0].restartCount}{\"\\n\"}{end}",
    ])?;
    assert_eq!(restarts.trim(), format!("{image} true 1"));

    // The outcome: a restart before the window began does not fail the check.
    let status = g.status.unwrap_or_default();
    let attempt = status.last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    assert_eq!(status.phase, Some(Phase::Current));
    assert_eq!(status.version.as_deref(), Some("2.3.2.2"));
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        image
    );
    let core = attempt
        .results
        .iter()
        .find(|r| r.name == "gluesync-gluesync-core-hub")
        .unwrap();
    assert_eq!(core.status, ComponentResultStatus::Ok);
    assert_eq!(sim.in_maintenance(), ["kept-in-maintenance-00020"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_delete_core_hub_is_refused_in_preflight() -> anyhow::Result<()> {
    let ns = namespace("on-delete").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    let _gko = Operator::start(&ns);
    wait_settled(&ns).await?;
    {
        use k8s_openapi::api::apps::v1::StatefulSet;
        let sts: kube::Api<StatefulSet> = kube::Api::namespaced(ns.client.clone(), &ns.name);
        sts.patch(
            "gluesync-gluesync-core-hub",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({
                "spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}}
            })),
        )
        .await?;
    }
    // The fault landed.
    assert_eq!(
        ns.kubectl(&[
            "get",
            "statefulset",
            "gluesync-gluesync-core-hub",
            "-o",
            "jsonpath={.spec.updateStrategy.type}",
        ])?
        .trim(),
        "OnDelete"
    );
    // Let GKO's watch see it before the spec changes.
    tokio::time::sleep(Duration::from_secs(1)).await;

    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let g = wait_for_platform(&ns, "the update to finish", |g| finished(g, 2)).await?;
    let status = g.status.unwrap_or_default();
    let attempt = status.last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Refused, "{attempt:?}");
    assert!(attempt.message.contains("OnDelete"), "{}", attempt.message);
    assert_eq!(
        status.phase,
        Some(Phase::UpdateAvailable),
        "a Refused update leaves the phase as it was"
    );
    let reasons = event_reasons_through(&ns, "UpdateRefused").await?;
    assert_eq!(reasons, ["UpdateStarted", "UpdateRefused"]);
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        "molo17/gluesync-core-hub:2.3.2.1"
    );
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-chronos").await?,
        "molo17/gluesync-chronos:0.3.2"
    );
    let calls = sim.calls();
    assert!(
        calls.enter.is_empty(),
        "pipelines were paused: {:?}",
        calls.enter
    );
    assert!(status.paused_pipelines.is_empty());
    Ok(())
}

/// Every (image, ready, restart count) the Core Hub pods were seen in, in order, as a watch sees them.
fn core_hub_pod_states(
    ns: &gko_test_support::TestNamespace,
) -> std::sync::Arc<std::sync::Mutex<Vec<(String, bool, i32)>>> {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::watcher;
    let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = out.clone();
    let api: kube::Api<Pod> = kube::Api::namespaced(ns.client.clone(), &ns.name);
    let config =
        watcher::Config::default().labels("app.kubernetes.io/name=gluesync-gluesync-core-hub");
    tokio::spawn(async move {
        let mut stream = watcher(api, config).boxed();
        while let Some(Ok(event)) = stream.next().await {
            let (watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event else {
                continue;
            };
            let image = p
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone())
                .unwrap_or_default();
            let Some(cs) = p
                .status
                .and_then(|s| s.container_statuses)
                .and_then(|c| c.into_iter().next())
            else {
                continue;
            };
            if let Ok(mut v) = sink.lock() {
                v.push((image, cs.ready, cs.restart_count));
            }
        }
    });
    out
}

/// The image changes of the namespace's StatefulSets, in order, as a watch sees them.
fn image_changes(
    ns: &gko_test_support::TestNamespace,
) -> std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>> {
    use futures::StreamExt;
    use k8s_openapi::api::apps::v1::StatefulSet;
    use kube::runtime::watcher;
    let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = out.clone();
    let api: kube::Api<StatefulSet> = kube::Api::namespaced(ns.client.clone(), &ns.name);
    tokio::spawn(async move {
        let mut last: std::collections::HashMap<String, String> = Default::default();
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = stream.next().await {
            let (watcher::Event::Apply(s) | watcher::Event::InitApply(s)) = event else {
                continue;
            };
            let name = s.metadata.name.clone().unwrap_or_default();
            let image = s
                .spec
                .and_then(|spec| spec.template.spec)
                .and_then(|p| p.containers.first().and_then(|c| c.image.clone()))
                .unwrap_or_default();
            if let Some(before) = last.insert(name.clone(), image.clone())
                && before != image
                && let Ok(mut v) = sink.lock()
            {
                v.push((name, image));
            }
        }
    });
    out
}
