//! GKO upgraded while an update runs: the previous release (`v0.3.0`, built once by
//! `hack/previous-release.sh` and cached) starts an update of 1,000 pipelines and is killed (SIGKILL) in
//! Drain with its maintenance requests going out, and right after its status writes entering CoreHub and
//! Resume (its fault point `GKO_PAUSE_AFTER_STATUS_WRITE`); this GKO takes the update over from the status
//! the previous release wrote, and finishes it: the update succeeds with one history entry, each pipeline
//! is asked into maintenance mode once and out once, and nothing is left paused but what a user paused.

use crate::common;

use std::time::Duration;

use common::*;
use gko_test_support::eventually;
use gluesync_operator::api::{UpdateResult, UpdateStep};
use serde_json::json;

/// The previous release's binary, built once into the cache.
fn previous_release() -> anyhow::Result<std::path::PathBuf> {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/previous-release.sh");
    let out = std::process::Command::new(script)
        .stderr(std::process::Stdio::inherit())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "hack/previous-release.sh failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let path = std::path::PathBuf::from(String::from_utf8(out.stdout)?.trim());
    anyhow::ensure!(path.is_file(), "no binary at {}", path.display());
    Ok(path)
}

/// Where the previous release is stopped.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// SIGKILL once Core Hub accepted some of its maintenance requests, while it drains.
    MidDrain,
    /// Right after its status write entering this step, before what follows it.
    After(UpdateStep),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_the_previous_release_started_is_finished_by_this_one() -> anyhow::Result<()> {
    let old = previous_release()?;
    for stop in [
        Stop::MidDrain,
        Stop::After(UpdateStep::CoreHub),
        Stop::After(UpdateStep::Resume),
    ] {
        taken_over(&old, stop).await?;
    }
    Ok(())
}

async fn taken_over(old: &std::path::Path, stop: Stop) -> anyhow::Result<()> {
    let ns = namespace("upgrade").await?;
    let sim = simulator().await?;
    sim.add_pipelines("p", 1_000);
    // Three more a user paused (beside the one the simulator starts with): they stay paused.
    let user_paused: Vec<String> = sim
        .pipelines()
        .iter()
        .filter(|p| !p.is_in_maintenance_mode)
        .take(3)
        .map(|p| p.id.clone())
        .collect();
    for id in &user_paused {
        sim.set_maintenance(id, true);
    }
    let mut kept = sim.in_maintenance();
    kept.sort();
    let running: std::collections::BTreeSet<String> = sim
        .pipelines()
        .into_iter()
        .filter(|p| !p.is_in_maintenance_mode)
        .map(|p| p.id)
        .collect();
    assert!(running.len() >= 1_000, "{} running", running.len());
    // Requests land a little late, so the drain lasts while the previous release sends them.
    sim.update_faults(|f| f.maintenance_delay_ms = 300);
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 1}))?;
    let env = match stop {
        Stop::MidDrain => vec![],
        Stop::After(step) => vec![(
            "GKO_PAUSE_AFTER_STATUS_WRITE".to_string(),
            format!("{step:?}"),
        )],
    };
    let mut previous = Gko::spawn(
        &ns,
        GkoOptions {
            binary: Some(old.to_path_buf()),
            instance: Some("gko-0-3-0".into()),
            env,
            ..Default::default()
        },
    )?;
    let before = wait_settled(&ns).await?;
    let history = before.status.as_ref().map_or(0, |s| s.history.len());
    let generation = before.metadata.generation.unwrap_or(0) + 1;
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;

    // The fault landed where it claims before the previous release is killed.
    let api = platforms(&ns);
    match stop {
        Stop::MidDrain => {
            eventually(
                "the previous release to send its maintenance requests",
                Duration::from_secs(120),
                || async { Ok((sim.calls().enter.len() >= 100).then_some(())) },
            )
            .await?;
            let g = api.get("gluesync").await?;
            assert_eq!(step_of(&g), Some(UpdateStep::Drain), "{stop:?}");
            let asked = sim.calls().enter.len();
            assert!(
                asked < running.len(),
                "{stop:?}: the drain was over before the kill ({asked} asked)"
            );
        }
        Stop::After(step) => {
            previous
                .wait_for_line("fault point hit", Duration::from_secs(120))
                .await?;
            let g = api.get("gluesync").await?;
            assert_eq!(step_of(&g), Some(step), "{stop:?}");
        }
    }
    previous.kill()?;
    let sent_before = sim.calls();
    println!(
        "{stop:?}: the previous release asked {} pipelines in and {} out before it was killed",
        sent_before.enter.len(),
        sent_before.exit.len()
    );

    let _gko = Gko::spawn(&ns, GkoOptions::default())?;
    let g = wait_finished(&ns, generation).await?;
    let status = g.status.unwrap_or_default();
    let attempt = status.last_attempt.clone().unwrap();
    assert_eq!(
        attempt.result,
        UpdateResult::Succeeded,
        "{stop:?}: {attempt:?}"
    );
    assert_eq!(
        status.history.len(),
        history + 1,
        "{stop:?}: one history entry"
    );
    assert_eq!(status.version.as_deref(), Some("2.3.2.2"), "{stop:?}");
    assert!(status.paused_pipelines.is_empty(), "{stop:?}");
    // Requests land late: wait for the last ones before looking at Core Hub.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let mut paused = sim.in_maintenance();
    paused.sort();
    assert_eq!(
        paused, kept,
        "{stop:?}: only what was paused before the update stays paused"
    );
    let calls = sim.calls();
    asked_once(stop, "in", &calls.enter, &running);
    asked_once(stop, "out", &calls.exit, &running);
    assert!(
        user_paused
            .iter()
            .all(|id| !calls.enter.contains_key(id) && !calls.exit.contains_key(id))
    );
    Ok(())
}

/// Every pipeline of `running`, and no other, was asked `way` (into or out of maintenance mode) once.
fn asked_once(
    stop: Stop,
    way: &str,
    asked: &std::collections::BTreeMap<String, u32>,
    running: &std::collections::BTreeSet<String>,
) {
    let ids: std::collections::BTreeSet<String> = asked.keys().cloned().collect();
    assert_eq!(
        &ids, running,
        "{stop:?}: every running pipeline asked {way}, and nothing else"
    );
    let twice: Vec<_> = asked.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(twice.is_empty(), "{stop:?}: asked {way} twice: {twice:?}");
}
