//! GKO updates itself last. GKO's Deployment lives on the control plane and its pods are simulated; a
//! supervisor here plays the kubelet for them: for each Ready pod it runs the real GKO process (named after
//! the pod, so GKO reads its own image from it), restarts that process if it dies while its pod stays, and
//! stops it (SIGTERM) when its pod goes. A pod whose image ends in `-crash` never becomes Ready, so no GKO
//! of that version ever runs.

use crate::common;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context;
use common::{kubelet::*, *};
use gko_test_support::TestNamespace;
use gluesync_operator::api::{ComponentResultStatus, GluesyncPlatform, UpdateResult};
use kube::{Api, ResourceExt};
use serde_json::json;

fn annotation(ns: &TestNamespace) -> anyhow::Result<String> {
    ns.kubectl(&[
        "get",
        "deploy",
        GKO,
        "-o",
        "jsonpath={.metadata.annotations.gluesync\\.molo17\\.com/self-update}",
    ])
}

/// Every value the self-update annotation of GKO's Deployment takes from now on, in order, as a watch
/// delivers each write of the Deployment (a value held for a moment is seen, unlike with a poll).
fn annotation_values(ns: &TestNamespace) -> Arc<Mutex<Vec<String>>> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let api: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(ns.client.clone(), &ns.name);
    let config = watcher::Config::default().fields(&format!("metadata.name={GKO}"));
    let record = seen.clone();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, config).default_backoff().applied_objects());
        while let Some(Ok(d)) = stream.next().await {
            let value = d
                .annotations()
                .get("gluesync.molo17.com/self-update")
                .cloned()
                .unwrap_or_default();
            let mut seen = record.lock().unwrap();
            if seen.last() != Some(&value) {
                seen.push(value);
            }
        }
    });
    seen
}

/// Waits until GKO's own update is RollingOut (its image changed).
async fn rolling_out(ns: &TestNamespace) -> anyhow::Result<()> {
    wait_for_platform(ns, "RollingOut", |g| {
        g.status
            .as_ref()
            .and_then(|s| s.self_update.as_ref())
            .is_some_and(|s| s.phase == gluesync_operator::api::SelfUpdatePhase::RollingOut)
    })
    .await?;
    Ok(())
}

/// GKO's entry in `lastAttempt`, once it is no longer SCHEDULED.
async fn gko_outcome(
    ns: &TestNamespace,
) -> anyhow::Result<(ComponentResultStatus, GluesyncPlatform)> {
    let g = wait_for_platform(ns, "GKO's own update to end", |g| {
        let s = g.status.clone().unwrap_or_default();
        s.self_update.is_none()
            && s.last_attempt.as_ref().is_some_and(|a| {
                a.results
                    .iter()
                    .any(|r| r.name == GKO && r.status != ComponentResultStatus::Scheduled)
            })
    })
    .await?;
    let entry = g
        .status
        .as_ref()
        .and_then(|s| s.last_attempt.as_ref())
        .and_then(|a| a.results.iter().find(|r| r.name == GKO))
        .map(|r| r.status)
        .context("GKO's entry")?;
    Ok((entry, g))
}

/// A sample install with the simulator, GKO's Deployment at 0.1.0 and its GKO running.
async fn rig(
    hint: &str,
    spec: serde_json::Value,
    min_ready: u32,
) -> anyhow::Result<(TestNamespace, gluesync_simulator::Simulator, Kubelet)> {
    let ns = namespace(hint).await?;
    let sim = simulator().await?;
    let mut base = json!({"stabilityWindowSeconds": 2, "stabilityTimeoutSeconds": 20});
    for (k, v) in spec.as_object().cloned().unwrap_or_default() {
        base[k] = v;
    }
    install_with_simulator(&ns, &sim, base)?;
    ns.apply(&deployment(OLD, min_ready))?;
    let kubelet = Kubelet::start(&ns);
    wait_settled(&ns).await?;
    gko_test_support::eventually("the first GKO to lead", Duration::from_secs(60), || async {
        let holder = lease_holder(&ns).unwrap_or_default();
        Ok(holder.starts_with(GKO).then_some(()))
    })
    .await?;
    Ok((ns, sim, kubelet))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gko_updates_itself_last_and_the_new_gko_reports() -> anyhow::Result<()> {
    let (ns, sim, kubelet) = rig("self-update", json!({}), 0).await?;
    let old_pod = lease_holder(&ns)?;
    // The Core Hub UI asks to update GKO alone ("Update one component"), to the catalog's latest.
    sim.set_catalog(
        "gluesync-operator",
        gluesync_simulator::CatalogEntry::all("0.2.0"),
    );
    let base = kubelet.conductor(&old_pod).context("the old GKO's API")?;
    // The UI sees GKO among what can be updated.
    let offered = gko_test_support::eventually("GKO offered", Duration::from_secs(30), || {
        let (base, token) = (base.clone(), sim.token_for("viewer"));
        async move {
            let body: serde_json::Value = reqwest::Client::new()
                .get(format!(
                    "{base}/services/gluesync-gluesync-core-hub/version/ga"
                ))
                .bearer_auth(token)
                .send()
                .await?
                .json()
                .await?;
            Ok(body["data"]["servicesToUpdate"].as_array().cloned())
        }
    })
    .await?;
    assert!(offered.contains(&json!(GKO)), "{offered:?}");
    let answer = gko_test_support::eventually("the UI's request", Duration::from_secs(60), || {
        let (base, token) = (base.clone(), sim.token_for("manager"));
        async move {
            let resp = reqwest::Client::new()
                .post(format!("{base}/containers"))
                .bearer_auth(token)
                .json(&json!({"action": "update", "ids": [GKO]}))
                .send()
                .await;
            Ok(match resp {
                Ok(r) if r.status().as_u16() != 503 => {
                    Some((r.status().as_u16(), r.json::<serde_json::Value>().await?))
                }
                _ => None,
            })
        }
    })
    .await?;
    assert_eq!(answer.0, 200, "{}", answer.1);
    let g = platforms(&ns).get("gluesync").await?;
    assert_eq!(
        g.spec.modules.get(GKO).map(String::as_str),
        Some("0.2.0"),
        "GKO alone, pinned"
    );
    assert_eq!(g.spec.version, "2.3.2.1", "Core Hub is not asked to move");
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-chronos").await?,
        "molo17/gluesync-chronos:0.3.2",
        "GKO alone: Chronos, newer in the catalog, stays"
    );
    let (entry, g) = gko_outcome(&ns).await?;
    let status = g.status.unwrap_or_default();
    assert_eq!(
        entry,
        ComponentResultStatus::Ok,
        "{:?}",
        status.last_attempt
    );
    assert_eq!(
        status.last_attempt.as_ref().unwrap().result,
        UpdateResult::Succeeded
    );
    assert!(
        status.history[0].message.contains("GKO updated to 0.2.0"),
        "{}",
        status.history[0].message
    );
    assert_eq!(
        image_of(&ns, "deployment", GKO).await?,
        "molo17/gluesync-operator:0.2.0"
    );
    assert_eq!(annotation(&ns)?, "", "the annotation is gone");
    // The new GKO holds the Lease; the old one's pod is gone and its process stopped.
    let holder = lease_holder(&ns)?;
    assert_ne!(holder, old_pod);
    let started = kubelet.started();
    assert!(
        started
            .iter()
            .any(|(p, i)| p == &holder && i.ends_with(":0.2.0")),
        "{started:?}"
    );
    let reasons = event_reasons_through(&ns, "OperatorUpdated").await?;
    let at = |r: &str| reasons.iter().position(|x| x == r);
    assert!(
        at("UpdateSucceeded") < at("OperatorRestarting")
            && at("OperatorRestarting") < at("OperatorUpdated"),
        "GKO updates itself after the update: {reasons:?}"
    );
    assert!(at("OperatorUpdateScheduled").is_some(), "{reasons:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_gko_that_never_comes_up_is_rolled_back_by_the_old_one() -> anyhow::Result<()> {
    let (ns, _sim, kubelet) = rig("self-update-crash", json!({}), 0).await?;
    let old_pod = lease_holder(&ns)?;
    let marks = annotation_values(&ns);
    patch_spec(&ns, json!({"modules": {GKO: "0.2.0-crash"}})).await?;
    // The fault landed: GKO's image was changed to the crashing one, and the Deployment said so.
    rolling_out(&ns).await?;
    let (entry, _) = gko_outcome(&ns).await?;
    let marks = marks.lock().unwrap().clone();
    assert!(
        marks.iter().any(|m| m == "RollingOut"),
        "the Deployment says so while the new GKO rolls out: {marks:?}"
    );
    assert_eq!(entry, ComponentResultStatus::RolledBack);
    assert_eq!(image_of(&ns, "deployment", GKO).await?, OLD);
    assert_eq!(annotation(&ns)?, "");
    assert_eq!(
        lease_holder(&ns)?,
        old_pod,
        "the old GKO is still in charge"
    );
    assert!(
        kubelet.started().iter().all(|(_, i)| i == OLD),
        "no crashing GKO ever ran"
    );
    let reasons = event_reasons_through(&ns, "OperatorRolledBack").await?;
    assert!(
        reasons.iter().any(|r| r == "OperatorRollingBack"),
        "{reasons:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn either_gko_killed_mid_way_still_ends_in_a_documented_outcome() -> anyhow::Result<()> {
    let (ns, _sim, kubelet) = rig(
        "self-update-kill",
        json!({"stabilityWindowSeconds": 30, "stabilityTimeoutSeconds": 90}),
        5,
    )
    .await?;
    let old_pod = lease_holder(&ns)?;
    patch_spec(&ns, json!({"modules": {GKO: "0.2.0"}})).await?;
    // The old GKO is killed right after it changed its own image (its pod stays 5 s more, until the new
    // pod is available: the kubelet starts it again).
    gko_test_support::eventually("GKO's image to change", Duration::from_secs(60), || async {
        Ok((image_of(&ns, "deployment", GKO).await? != OLD).then_some(()))
    })
    .await?;
    kubelet.kill(&old_pod)?;
    // The new GKO takes over once the old pod goes; it is killed before it reports (its stability
    // window is 30 s).
    let new_pod =
        gko_test_support::eventually("the new GKO to lead", Duration::from_secs(60), || async {
            let holder = lease_holder(&ns).unwrap_or_default();
            Ok((holder != old_pod && holder.starts_with(GKO)).then_some(holder))
        })
        .await?;
    let g = platforms(&ns).get("gluesync").await?;
    assert!(
        g.status.as_ref().is_some_and(|s| s.self_update.is_some()),
        "the new GKO had not reported yet"
    );
    kubelet.kill(&new_pod)?;
    let (entry, _) = gko_outcome(&ns).await?;
    assert_eq!(entry, ComponentResultStatus::Ok);
    assert_eq!(annotation(&ns)?, "");
    let restarts = kubelet
        .started()
        .iter()
        .filter(|(p, _)| p == &new_pod)
        .count();
    assert!(
        restarts >= 2,
        "the new GKO was restarted after its kill: {:?}",
        kubelet.started()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_gitops_gko_never_touches_itself_and_a_hand_change_cancels() -> anyhow::Result<()> {
    let (ns, _sim, kubelet) =
        rig("self-update-gitops", json!({"updatePolicy": "gitops"}), 0).await?;
    let old_pod = lease_holder(&ns)?;
    patch_spec(&ns, json!({"modules": {GKO: "0.2.0"}})).await?;
    let g = wait_finished(&ns, 2).await?;
    let status = g.status.unwrap_or_default();
    assert!(
        status
            .last_attempt
            .as_ref()
            .unwrap()
            .results
            .iter()
            .all(|r| r.name != GKO)
    );
    assert!(status.self_update.is_none());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(image_of(&ns, "deployment", GKO).await?, OLD);
    assert_eq!(annotation(&ns)?, "");

    // Under ui, a self-update that someone overrides by hand is dropped. (The new pod must be ready for
    // two minutes before the Deployment counts it available: the self-update stays RollingOut meanwhile.)
    ns.kubectl(&[
        "patch",
        "deploy",
        GKO,
        "-p",
        r#"{"spec":{"minReadySeconds":120}}"#,
    ])?;
    patch_spec(
        &ns,
        json!({"updatePolicy": "ui", "modules": {GKO: "0.2.0"}}),
    )
    .await?;
    rolling_out(&ns).await?;
    // Meanwhile the old GKO's Conductor API answers 503 with Retry-After: 60, as the Conductor does during
    // its own update, and keeps its description readable.
    let base = kubelet.conductor(&old_pod).context("the old GKO's API")?;
    let answer = gko_test_support::eventually("a 503", Duration::from_secs(30), || {
        let base = base.clone();
        async move {
            let resp = reqwest::get(format!("{base}/health")).await?;
            let retry = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            Ok((resp.status().as_u16() == 503).then_some(retry))
        }
    })
    .await?;
    assert_eq!(answer.as_deref(), Some("60"));
    assert_eq!(
        reqwest::get(format!("{base}/openapi.json"))
            .await?
            .status()
            .as_u16(),
        200
    );
    ns.kubectl(&[
        "set",
        "image",
        &format!("deployment/{GKO}"),
        &format!("{GKO}=molo17/gluesync-operator:0.3.0"),
    ])?;
    let (entry, _) = gko_outcome(&ns).await?;
    assert_eq!(entry, ComponentResultStatus::Skipped);
    assert_eq!(
        image_of(&ns, "deployment", GKO).await?,
        "molo17/gluesync-operator:0.3.0"
    );
    assert_eq!(annotation(&ns)?, "");
    event_reasons_through(&ns, "OperatorUpdateCancelled").await?;
    // And the API serves again (on whichever GKO runs now: the hand-set image rolled GKO's pod).
    gko_test_support::eventually("the API back", Duration::from_secs(60), || {
        let bases = kubelet.addresses();
        async move {
            for base in bases {
                if let Ok(r) = reqwest::get(format!("http://{base}/conductor/api/health")).await
                    && r.status().as_u16() == 200
                {
                    return Ok(Some(()));
                }
            }
            Ok(None)
        }
    })
    .await?;
    Ok(())
}
