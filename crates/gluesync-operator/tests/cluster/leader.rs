//! Two GKO processes on one namespace: only the holder of the Lease calls Core Hub or writes to the
//! cluster; killing the holder mid-update hands the update over to the other, which finishes it.

use crate::common;

use std::time::Duration;

use common::*;
use gluesync_operator::api::{UpdateResult, UpdateStep};
use serde_json::json;

/// A sample install with the simulator, GKO `gko-a` holding the Lease, and `gko-b` ready beside it.
async fn two_gkos(
    hint: &str,
) -> anyhow::Result<(
    gko_test_support::TestNamespace,
    gluesync_simulator::Simulator,
    Gko,
    Gko,
)> {
    let ns = namespace(hint).await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 2}))?;
    let named = |n: &str| GkoOptions {
        instance: Some(n.into()),
        ..Default::default()
    };
    let a = Gko::spawn(&ns, named("gko-a"))?;
    wait_settled(&ns).await?;
    assert_eq!(lease_holder(&ns)?, "gko-a");
    let b = Gko::spawn(&ns, named("gko-b"))?;
    eventually_ready(&b).await?;
    Ok((ns, sim, a, b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holder_acts_and_a_killed_holder_hands_over() -> anyhow::Result<()> {
    let (ns, sim, mut a, b) = two_gkos("leader").await?;

    // A whole update with both running.
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let g = wait_finished(&ns, 2).await?;
    assert_eq!(
        g.status.unwrap_or_default().last_attempt.unwrap().result,
        UpdateResult::Succeeded
    );
    let agents = sim.calls().by_agent;
    assert!(
        agents.keys().any(|k| k.contains("(gko-a)")),
        "the holder called Core Hub: {agents:?}"
    );
    assert!(
        !agents.keys().any(|k| k.contains("(gko-b)")),
        "the other did not: {agents:?}"
    );
    for metric in [
        "gluesync_operator_status_writes_total",
        "gluesync_operator_workload_writes_total",
        "gluesync_operator_events_total",
    ] {
        assert!(a.metric(metric).await? > 0.0, "{metric} of the holder");
        assert_eq!(b.metric(metric).await?, 0.0, "{metric} of the other");
    }
    // `leader` says who holds the Lease.
    assert_eq!(a.metric("gluesync_operator_leader").await?, 1.0);
    assert_eq!(b.metric("gluesync_operator_leader").await?, 0.0);

    // The holder is killed mid-update: the other takes the Lease once it runs out, and finishes.
    sim.update_faults(|f| f.maintenance_delay_ms = 2000);
    patch_spec(&ns, json!({"version": "2.3.2.1"})).await?;
    wait_for_step(&ns, UpdateStep::Drain).await?;
    a.kill()?;
    let g = wait_finished(&ns, 3).await?;
    let status = g.status.unwrap_or_default();
    assert_eq!(
        status.last_attempt.as_ref().unwrap().result,
        UpdateResult::Succeeded,
        "{:?}",
        status.last_attempt
    );
    assert_eq!(status.history.len(), 2, "one history entry per update");
    assert_eq!(lease_holder(&ns)?, "gko-b");
    assert!(b.metric("gluesync_operator_status_writes_total").await? > 0.0);
    assert_eq!(b.metric("gluesync_operator_leader").await?, 1.0);
    assert!(
        sim.calls().by_agent.keys().any(|k| k.contains("(gko-b)")),
        "the new holder called Core Hub"
    );
    gko_test_support::eventually(
        "every pipeline running",
        Duration::from_secs(30),
        || async { Ok((sim.in_maintenance() == ["kept-in-maintenance-00020"]).then_some(())) },
    )
    .await?;
    assert!(sim.calls().enter.values().all(|n| *n <= 2));
    Ok(())
}

/// A time of the Lease's spec (`renewTime`, `acquireTime`).
fn lease_time(
    ns: &gko_test_support::TestNamespace,
    field: &str,
) -> anyhow::Result<jiff::Timestamp> {
    Ok(lease_field(ns, field)?.parse()?)
}

/// A GKO that does not hold the Lease is still ready: readiness is about its caches.
async fn eventually_ready(gko: &Gko) -> anyhow::Result<()> {
    let ready = gko.metrics_url.replace("/metrics", "/readyz");
    gko_test_support::eventually(
        "the second GKO to be ready",
        Duration::from_secs(30),
        || {
            let ready = ready.clone();
            async move {
                Ok(reqwest::get(&ready)
                    .await?
                    .status()
                    .is_success()
                    .then_some(()))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_holder_releases_the_lease_and_the_other_finishes() -> anyhow::Result<()> {
    let (ns, sim, mut a, _b) = two_gkos("leader-term").await?;

    sim.update_faults(|f| f.maintenance_delay_ms = 2000);
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    wait_for_step(&ns, UpdateStep::Drain).await?;
    assert_eq!(lease_holder(&ns)?, "gko-a");
    // SIGTERM, as Kubernetes stops a pod: the call in hand finishes, then the Lease is given up.
    a.terminate()?;
    let last_renewal = lease_time(&ns, "renewTime")?;
    assert!(
        a.said("released the Lease"),
        "the holder released the Lease on SIGTERM"
    );
    gko_test_support::eventually(
        "gko-b to hold the Lease",
        Duration::from_secs(30),
        || async { Ok((lease_holder(&ns)? == "gko-b").then_some(())) },
    )
    .await?;
    // Taken over before the released Lease would have run out by itself (its last renewal + 15 s).
    let acquired = lease_time(&ns, "acquireTime")?;
    assert!(
        acquired < last_renewal + jiff::SignedDuration::from_secs(15),
        "taken at {acquired}, the Lease was renewed last at {last_renewal}"
    );
    let g = wait_finished(&ns, 2).await?;
    let status = g.status.unwrap_or_default();
    assert_eq!(
        status.last_attempt.as_ref().unwrap().result,
        UpdateResult::Succeeded
    );
    assert_eq!(status.history.len(), 1);
    gko_test_support::eventually(
        "every pipeline running",
        Duration::from_secs(30),
        || async { Ok((sim.in_maintenance() == ["kept-in-maintenance-00020"]).then_some(())) },
    )
    .await?;
    Ok(())
}
