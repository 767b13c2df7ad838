//! GKO and the control plane going away under it: kube-apiserver killed and started again
//! (`hack/controlplane.sh restart`), then a new version asked for: GKO's watches start again and it runs
//! the update, without waiting out minutes of back-off on watches the restarted API server refuses. And
//! GKO stopped (SIGTERM) while the API server is out of its reach, before its caches ever filled: it
//! exits within a pod's grace period instead of waiting for them forever.
//! (The restart is of a control plane of the test's own: the tests on the shared one run beside it.)

use crate::common;

use std::time::Duration;

use common::*;
use gko_test_support::FaultProxy;
use gluesync_operator::api::UpdateResult;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_asked_for_after_kube_apiserver_restarts_runs() -> anyhow::Result<()> {
    let ns = namespace_on(
        gko_test_support::own_control_plane("restart"),
        "apiserver-restart",
    )
    .await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 1}))?;
    let gko = Gko::spawn(&ns, GkoOptions::default())?;
    wait_settled(&ns).await?;

    restart_control_plane(ns.cp, "kube-apiserver").await?;
    // The fault landed: GKO's watches were cut.
    gko_test_support::eventually("GKO's watches to fail", Duration::from_secs(30), || async {
        Ok(gko.said("Unable to connect to the server").then_some(()))
    })
    .await?;
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    // Well inside the minutes the back-off of refused watches would take.
    let g = wait_finished_within(&ns, 2, Duration::from_secs(60)).await?;
    let attempt = g.status.unwrap_or_default().last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_gko_whose_caches_never_filled() -> anyhow::Result<()> {
    let ns = namespace("stop-unlisted").await?;
    let proxy = FaultProxy::in_front_of(ns.cp)?;
    proxy.stop();
    let mut gko = Gko::spawn(
        &ns,
        GkoOptions {
            kubeconfig: Some(proxy.kubeconfig(ns.cp)?),
            ..Default::default()
        },
    )?;
    // The fault landed: GKO's lists cannot reach the API server.
    gko_test_support::eventually("GKO's lists to fail", Duration::from_secs(30), || async {
        Ok(gko.said("Unable to connect to the server").then_some(()))
    })
    .await?;
    assert!(
        gko.stop_within(Duration::from_secs(30))?,
        "GKO did not exit within 30 s of SIGTERM"
    );
    assert!(gko.said("stopping"), "GKO saw the signal");
    Ok(())
}
