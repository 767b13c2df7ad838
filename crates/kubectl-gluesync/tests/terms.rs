//! Updates on the user's terms, on the local control plane with GKO and the simulator: a supervised
//! update approved with `kubectl gluesync approve`, replaced by a new spec while it waits, and refused when
//! no approval comes; a maintenance window that is closed, opens, and closes during a long drain.

#[path = "../../gluesync-operator/tests/cluster/common/mod.rs"]
mod common;
mod support;

use std::time::Duration;

use common::*;
use gko_test_support::TestNamespace;
use gluesync_operator::api::{
    APPROVE_ANNOTATION, GluesyncPlatform, Phase, UpdateResult, UpdateStep,
};
use serde_json::json;
use support::{plugin, stderr, stdout};

fn reconciling(g: &GluesyncPlatform) -> Option<String> {
    g.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Reconciling" && c.status == "True")
        .map(|c| c.reason.clone())
}

async fn install(
    hint: &str,
    spec: serde_json::Value,
) -> anyhow::Result<(TestNamespace, gluesync_simulator::Simulator, Operator)> {
    let ns = namespace(hint).await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, spec)?;
    let gko = Operator::start_with_role(&ns).await?;
    wait_settled(&ns).await?;
    Ok((ns, sim, gko))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervised_update_waits_untouched_until_approved_and_a_new_spec_needs_a_new_approval()
-> anyhow::Result<()> {
    let (ns, sim, _gko) = install("approval", json!({"approval": "manual"})).await?;
    // Approving with nothing to approve is refused.
    let o = plugin(&ns, &["approve"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no update of gluesyncplatform/gluesync runs"),
        "{}",
        stderr(&o)
    );

    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let g = wait_for_platform(&ns, "the update to wait for its approval", |g| {
        reconciling(g).as_deref() == Some("WaitingForApproval")
    })
    .await?;
    let u = g.status.as_ref().unwrap().update.clone().unwrap();
    assert_eq!(u.step.name(), UpdateStep::Waiting);
    assert_eq!(g.status.as_ref().unwrap().phase, Some(Phase::Updating));
    let first = u.approval_id.clone().unwrap();
    // It stays so: nothing paused, no image changed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let g = platforms(&ns).get("gluesync").await?;
    assert_eq!(step_of(&g), Some(UpdateStep::Waiting));
    assert!(g.status.as_ref().unwrap().paused_pipelines.is_empty());
    assert!(
        sim.calls().enter.is_empty(),
        "no pipeline asked into maintenance mode"
    );
    assert_eq!(sim.in_maintenance().len(), 1, "only the one already paused");
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        "molo17/gluesync-core-hub:2.3.2.1"
    );
    let screen = stdout(&plugin(&ns, &["status"]));
    assert!(screen.contains("Step:       Waiting (4 of 10)"), "{screen}");
    assert!(
        screen.contains(&format!(
            "`kubectl gluesync approve` writes {APPROVE_ANNOTATION}={first}"
        )),
        "{screen}"
    );
    let plan = stdout(&plugin(&ns, &["plan", "2.3.2.2"]));
    assert!(
        plan.contains("no update would start: an update to 2.3.2.2 runs now (step Waiting)"),
        "{plan}"
    );

    // A new spec while it waits: a new plan, its own approval.
    patch_spec(
        &ns,
        json!({"modules": {"gluesync-gluesync-grafana": "11.2.0"}}),
    )
    .await?;
    let g = wait_for_platform(&ns, "a new plan", |g| {
        g.status
            .as_ref()
            .and_then(|s| s.update.as_ref())
            .is_some_and(|u| {
                u.approval_id.as_deref() != Some(first.as_str())
                    && u.step.name() == UpdateStep::Waiting
            })
    })
    .await?;
    // Events follow the status writes that cause them: waited for, not read once.
    event_reasons_through(&ns, "UpdatePlanReplaced").await?;
    let second = g.status.unwrap().update.unwrap().approval_id.unwrap();
    assert!(second.starts_with("generation-3-"), "{second}");

    // `kubectl gluesync approve`: the drain begins, and the update ends as any other.
    let o = plugin(&ns, &["approve"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("{APPROVE_ANNOTATION}={second}")));
    let g = wait_finished(&ns, 3).await?;
    let s = g.status.unwrap();
    assert_eq!(
        s.last_attempt.as_ref().unwrap().result,
        UpdateResult::Succeeded
    );
    assert_eq!(s.last_attempt.as_ref().unwrap().paused_pipelines.len(), 20);
    let reasons = event_reasons_through(&ns, "UpdateSucceeded").await?;
    for r in [
        "WaitingForApproval",
        "UpdateApproved",
        "PipelinesPaused",
        "UpdateSucceeded",
    ] {
        assert!(reasons.contains(&r.to_string()), "{r} in {reasons:?}");
    }
    assert!(
        s.history[0]
            .steps
            .iter()
            .any(|t| t.step == UpdateStep::Waiting),
        "{:?}",
        s.history[0].steps
    );

    // The approval is the plan's alone: a later spec (a Git commit, say) that brings the approved
    // plan's approvalID as its requestID, with a new pin, waits for an approval of its own while the
    // old annotation still stands.
    let enters = sim.calls().enter.len();
    let grafana = image_of(&ns, "deployment", "gluesync-gluesync-grafana").await?;
    patch_spec(
        &ns,
        json!({"modules": {"gluesync-gluesync-grafana": "11.3.0"}, "requestID": second}),
    )
    .await?;
    let g = wait_for_platform(&ns, "the later plan to wait for its approval", |g| {
        g.metadata.generation == Some(4) && reconciling(g).as_deref() == Some("WaitingForApproval")
    })
    .await?;
    let third = g.status.unwrap().update.unwrap().approval_id.unwrap();
    assert!(third.starts_with(&format!("{second}-")), "{third}");
    assert_eq!(
        g.metadata
            .annotations
            .unwrap_or_default()
            .get(APPROVE_ANNOTATION),
        Some(&second),
        "the old approval still stands"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let g = platforms(&ns).get("gluesync").await?;
    assert_eq!(step_of(&g), Some(UpdateStep::Waiting));
    assert_eq!(
        sim.calls().enter.len(),
        enters,
        "nothing paused for the later plan"
    );
    assert_eq!(
        image_of(&ns, "deployment", "gluesync-gluesync-grafana").await?,
        grafana,
        "nothing changed for the later plan"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_nobody_approves_ends_refused_with_nothing_changed() -> anyhow::Result<()> {
    let (ns, sim, _gko) = install(
        "approval-timeout",
        json!({"approval": "manual", "approvalTimeoutMinutes": 1}),
    )
    .await?;
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    wait_for_platform(&ns, "the update to wait for its approval", |g| {
        reconciling(g).as_deref() == Some("WaitingForApproval")
    })
    .await?;
    let g = wait_finished_within(&ns, 2, Duration::from_secs(120)).await?;
    let s = g.status.unwrap();
    let a = s.last_attempt.as_ref().unwrap();
    assert_eq!(a.result, UpdateResult::Refused);
    assert!(
        a.message.contains("not approved within 1 minute ("),
        "{}",
        a.message
    );
    assert!(a.paused_pipelines.is_empty());
    assert!(
        sim.calls().enter.is_empty(),
        "no pipeline was asked into maintenance mode"
    );
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        "molo17/gluesync-core-hub:2.3.2.1"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_window_holds_the_update_until_it_opens_and_its_closing_does_not_stop_the_drain()
-> anyhow::Result<()> {
    // A window that opens at the next whole minute (UTC) and lasts a minute.
    let (ns, sim, _gko) = install("window", json!({"drainTimeoutSeconds": 240})).await?;
    let now = jiff::Timestamp::now();
    let mut opens =
        jiff::Timestamp::from_second(now.as_second() + 60 - now.as_second() % 60).unwrap();
    if opens.duration_since(now).as_secs() < 15 {
        // Too close to see it closed: the minute after.
        opens = opens
            .checked_add(jiff::SignedDuration::from_secs(60))
            .unwrap();
    }
    let start = opens.strftime("%H:%M").to_string();
    // The catalog's answer first (it knows 2.3.2.2), so that the phase before the update is the one
    // after the first catalog read and not the one before it.
    wait_for_platform(&ns, "the catalog's newer Core Hub", |g| {
        g.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(Phase::UpdateAvailable))
    })
    .await?;
    patch_spec(
        &ns,
        json!({"version": "2.3.2.2", "maintenanceWindows": [{"start": start, "durationMinutes": 1}]}),
    )
    .await?;
    let g = wait_for_platform(&ns, "the update to wait for the window", |g| {
        reconciling(g).as_deref() == Some("WaitingForMaintenanceWindow")
    })
    .await?;
    let s = g.status.clone().unwrap();
    assert!(s.update.is_none(), "no update starts outside the window");
    assert_eq!(
        s.phase,
        Some(Phase::UpdateAvailable),
        "the phase stays what it was"
    );
    assert_eq!(s.next_window.as_ref().map(|t| t.0), Some(opens));
    event_reasons_through(&ns, "WaitingForMaintenanceWindow").await?;
    let screen = stdout(&plugin(&ns, &["status"]));
    assert!(
        screen.contains("Window:     the update waits for the maintenance window at"),
        "{screen}"
    );
    // Each maintenance request lands 70 s late: the drain outlasts the window's minute.
    sim.set_faults(gluesync_simulator::Faults {
        enter_delay_ms: 70_000,
        ..Default::default()
    });
    let g = gko_test_support::eventually(
        "the drain, once the window opens",
        Duration::from_secs(90),
        || async {
            let g = platforms(&ns).get("gluesync").await?;
            Ok((step_of(&g) == Some(UpdateStep::Drain)).then_some(g))
        },
    )
    .await?;
    let started = g
        .status
        .as_ref()
        .unwrap()
        .update
        .as_ref()
        .unwrap()
        .started_at
        .0;
    assert!(
        started >= opens,
        "started {started}, the window opened {opens}"
    );
    // The window closes while the drain waits for its late requests: still in Drain after its end.
    let closes = opens
        .checked_add(jiff::SignedDuration::from_secs(60))
        .unwrap();
    let left = closes.duration_since(jiff::Timestamp::now()).as_secs() + 2;
    tokio::time::sleep(Duration::from_secs(left.max(0) as u64)).await;
    let g = platforms(&ns).get("gluesync").await?;
    assert_eq!(
        step_of(&g),
        Some(UpdateStep::Drain),
        "the drain outlasts the window"
    );
    assert!(
        sim.pending_maintenance() > 0,
        "the late requests have not landed yet"
    );
    let g = wait_finished_within(&ns, 2, Duration::from_secs(240)).await?;
    let s = g.status.unwrap();
    assert_eq!(
        s.last_attempt.as_ref().unwrap().result,
        UpdateResult::Succeeded
    );
    let ended = s.last_attempt.as_ref().unwrap().finished_at.0;
    assert!(
        ended > closes,
        "the update ran past the window's end ({ended}): the window did not stop it"
    );
    assert!(s.next_window.is_none());
    Ok(())
}
