//! The Secrets GKO may read and the Core Hub URLs it may send credentials to are settings of GKO, not of
//! the resource: a spec naming anything else is Stalled, and nothing is read or sent.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

/// Waits until the platform is Stalled for `reason`.
async fn wait_stalled(
    ns: &gko_test_support::TestNamespace,
    reason: &str,
) -> anyhow::Result<gluesync_operator::api::GluesyncPlatform> {
    wait_for_platform(ns, &format!("Stalled {reason}"), |g| {
        g.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Stalled" && c.status == "True" && c.reason == reason)
        })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_gko_may_not_read_is_never_used() -> anyhow::Result<()> {
    let ns = namespace("secret-not-allowed").await?;
    let sim = simulator().await?;
    // A namespace editor points GKO at another Secret, holding credentials too.
    ns.apply(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: billing-db\nstringData:\n  username: admin\n  password: admin\n",
    )?;
    install_with_simulator(
        &ns,
        &sim,
        json!({"coreHub": {"credentialsSecret": "billing-db"}}),
    )?;
    let _gko = Operator::start_with_role(&ns).await?;
    let g = wait_stalled(&ns, "SecretNotAllowed").await?;
    let message = g.status.unwrap_or_default().message.unwrap_or_default();
    assert!(message.contains("billing-db"), "{message}");

    // An update asked for meanwhile does not start, and Core Hub hears nothing.
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let g = platforms(&ns).get("gluesync").await?;
    let status = g.status.unwrap_or_default();
    assert!(status.update.is_none() && status.last_attempt.is_none());
    let calls = sim.calls();
    assert_eq!((calls.logins, calls.list_pipelines), (0, 0));
    assert!(calls.by_agent.is_empty(), "{:?}", calls.by_agent);
    let reasons = event_reasons_through(&ns, "SecretNotAllowed").await?;
    assert!(reasons.iter().all(|r| r != "UpdateStarted"), "{reasons:?}");

    // Named back to the Secret GKO may use, the update runs.
    patch_spec(
        &ns,
        json!({"coreHub": {"credentialsSecret": "corehub-credentials"}}),
    )
    .await?;
    let g = wait_finished(&ns, 3).await?;
    assert_eq!(
        g.status.unwrap_or_default().last_attempt.unwrap().result,
        gluesync_operator::api::UpdateResult::Succeeded
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_never_sent_to_a_url_gko_may_not_call() -> anyhow::Result<()> {
    let ns = namespace("url-not-allowed").await?;
    let sim = simulator().await?;
    // The simulator again, under a name GKO may not call: it records every request it gets.
    let elsewhere = sim.url.replace("127.0.0.1", "localhost");
    install_with_simulator(&ns, &sim, json!({"coreHub": {"url": elsewhere}}))?;
    let _gko = Operator::start(&ns);
    let g = wait_stalled(&ns, "CoreHubURLNotAllowed").await?;
    let message = g.status.unwrap_or_default().message.unwrap_or_default();
    assert!(message.contains("localhost"), "{message}");
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status = platforms(&ns)
        .get("gluesync")
        .await?
        .status
        .unwrap_or_default();
    assert!(status.update.is_none() && status.last_attempt.is_none());
    let calls = sim.calls();
    assert!(
        calls.by_agent.is_empty(),
        "no request reached it: {:?}",
        calls.by_agent
    );
    assert_eq!(calls.logins, 0);
    Ok(())
}
