//! The Secrets GKO may read and the Core Hub URLs it may send credentials to are settings of GKO, not of
//! the resource: a spec naming anything else is Stalled, and nothing is read or sent.

use crate::common;
use crate::tls_listener;

use std::time::Duration;

use common::*;
use gluesync_operator::api::UpdateResult;
use serde_json::json;
use tls_listener::TlsListener;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_never_sent_over_an_unverified_tls_connection() -> anyhow::Result<()> {
    let ns = namespace("unverified-tls").await?;
    let sim = simulator().await?;
    // Core Hub at a URL GKO may call, behind a certificate nobody vouches for: no caSecret, no
    // insecureSkipVerify.
    let listener = TlsListener::start().await?;
    install_with_simulator(
        &ns,
        &sim,
        json!({"coreHub": {"url": listener.url}, "drainTimeoutSeconds": 5}),
    )?;
    let _gko = Operator::start(&ns);
    wait_settled(&ns).await?;
    assert_eq!(
        listener.handshakes(),
        0,
        "GKO calls Core Hub only to update"
    );

    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    // Status says why while the update waits for Core Hub...
    wait_for_platform(&ns, "a message naming the certificate", |g| {
        g.status
            .as_ref()
            .and_then(|s| s.message.as_deref())
            .is_some_and(|m| m.contains("does not trust") && m.contains("spec.coreHub.caSecret"))
    })
    .await?;
    // ...and in the refused update's outcome.
    let g = wait_finished(&ns, 2).await?;
    let attempt = g.status.unwrap_or_default().last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Refused, "{}", attempt.message);
    assert!(
        attempt.message.contains("certificate GKO does not trust"),
        "{}",
        attempt.message
    );

    // The fault landed: GKO did connect, and refused the certificate during the handshake...
    assert!(listener.handshakes() > 0, "GKO never tried to connect");
    let failed = listener.failed_handshakes();
    assert!(!failed.is_empty(), "no handshake failed");
    assert!(
        failed.iter().all(|e| e.contains("UnknownCA")),
        "each handshake ends with GKO's alert that it does not know the CA: {failed:?}"
    );
    // ...so nothing was sent.
    let requests = listener.requests();
    assert!(requests.is_empty(), "requests arrived: {requests:?}");

    // Control: with insecureSkipVerify the same listener receives GKO's login and calls.
    patch_spec(
        &ns,
        json!({"coreHub": {"insecureSkipVerify": true}, "requestID": "skip-verify"}),
    )
    .await?;
    gko_test_support::eventually(
        "GKO's calls at the listener",
        Duration::from_secs(30),
        || async {
            let requests = listener.requests();
            let login = requests
                .iter()
                .any(|r| r.method == "POST" && r.path == "/authentication/login" && r.password);
            let listed = requests
                .iter()
                .any(|r| r.path == "/pipelines" && r.authorization);
            Ok((login && listed).then_some(()))
        },
    )
    .await?;
    let g = wait_finished(&ns, 3).await?;
    let attempt = g.status.unwrap_or_default().last_attempt.unwrap();
    assert_eq!(
        attempt.result,
        UpdateResult::Succeeded,
        "{}",
        attempt.message
    );
    Ok(())
}
