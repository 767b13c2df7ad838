//! The pre-pull on the local control plane: before any pipeline is paused, GKO pulls the new Core Hub
//! and agent images on the node that runs their pods (a short-lived pod per node and image), so that the
//! pause does not wait for the registry. The simulated node's image cache (hack/pullsim) takes 20 s to
//! pull an image whose tag ends in "-slow-pull" on a node that has not pulled it; each test's tag names its
//! namespace, so no other test has pulled it.

use crate::common;

use std::{collections::BTreeSet, time::Duration};

use common::*;
use gko_test_support::{TestNamespace, eventually};
use gluesync_operator::api::{PRE_PULL_LABEL, Phase, UpdateResult, UpdateStep};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, api::ListParams};
use serde_json::json;

/// The pre-pull pods of the namespace (labelled, and owned by a GluesyncPlatform).
async fn pre_pull_pods(ns: &TestNamespace) -> anyhow::Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    Ok(pods
        .list(&ListParams::default().labels(PRE_PULL_LABEL))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.owner_references.is_some())
        .collect())
}

/// Waits until the pre-pull pods are made, and answers them.
async fn pods_made(ns: &TestNamespace) -> anyhow::Result<Vec<Pod>> {
    eventually("the pre-pull pods", Duration::from_secs(30), || async {
        let pods = pre_pull_pods(ns).await?;
        Ok((!pods.is_empty()).then_some(pods))
    })
    .await
}

/// Waits until the pre-pull pods are gone.
async fn pods_go(ns: &TestNamespace) -> anyhow::Result<()> {
    eventually(
        "the pre-pull pods to go",
        Duration::from_secs(30),
        || async { Ok(pre_pull_pods(ns).await?.is_empty().then_some(())) },
    )
    .await
}

/// A Core Hub version whose images no node has pulled yet.
fn slow_version(ns: &TestNamespace) -> String {
    format!("2.3.2.2-{}-slow-pull", ns.name)
}

fn seconds_of(g: &gluesync_operator::api::GluesyncPlatform, step: UpdateStep) -> i64 {
    g.status.as_ref().unwrap().history[0]
        .steps
        .iter()
        .find(|s| s.step == step)
        .map_or(-1, |s| s.seconds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_image_is_pulled_before_the_drain_and_the_pause_does_not_wait_for_it()
-> anyhow::Result<()> {
    let ns = namespace("pre-pull").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    // With the Role of deploy/rbac.yaml only: creating the pods is among its rights.
    let _gko = Operator::start_with_role(&ns).await?;
    wait_settled(&ns).await?;
    let version = slow_version(&ns);
    // A pod that carries the pre-pull label but that GKO did not make: GKO leaves it alone.
    let admin: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    let stranger: Pod = serde_json::from_value(json!({
        "metadata": {"name": "not-gkos", "labels": {PRE_PULL_LABEL: "gluesync"}},
        "spec": {"nodeName": "kwok-node-0", "containers": [{"name": "c", "image": "busybox:1.36"}]},
    }))?;
    admin.create(&Default::default(), &stranger).await?;
    patch_spec(&ns, json!({"version": version})).await?;

    wait_for_step(&ns, UpdateStep::PrePull).await?;
    let pods = pods_made(&ns).await?;
    // The status lists each pod before it is made (the admission policy reads the list).
    let g = platforms(&ns).get("gluesync").await?;
    let listed: BTreeSet<(String, String, String)> = g
        .status
        .and_then(|s| s.update)
        .map(|u| u.pre_pulls)
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.pod, e.node, e.image))
        .collect();
    for p in &pods {
        let spec = p.spec.as_ref().unwrap();
        let made = (
            p.metadata.name.clone().unwrap(),
            spec.node_name.clone().unwrap(),
            spec.containers[0].image.clone().unwrap(),
        );
        assert!(listed.contains(&made), "{made:?} not in {listed:?}");
    }
    // One pod per new image (this install has no agent: Core Hub's), on the node Core Hub's pod runs
    // on, made to pull
    // and exit: no token, the command `true`, owned by the GluesyncPlatform.
    let images: BTreeSet<String> = pods
        .iter()
        .map(|p| {
            p.spec.as_ref().unwrap().containers[0]
                .image
                .clone()
                .unwrap()
        })
        .collect();
    assert!(
        images.contains(&format!("molo17/gluesync-core-hub:{version}")),
        "{images:?}"
    );
    for p in &pods {
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("kwok-node-0"));
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(
            spec.containers[0].command.as_deref(),
            Some(&["true".to_string()][..])
        );
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("GluesyncPlatform", "gluesync")
        );
    }
    // The pull takes its time, and nothing is paused meanwhile.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let g = platforms(&ns).get("gluesync").await?;
    assert_eq!(step_of(&g), Some(UpdateStep::PrePull));
    assert!(sim.calls().enter.is_empty(), "{:?}", sim.calls().enter);

    let g = wait_finished(&ns, 2).await?;
    let status = g.status.clone().unwrap();
    let attempt = status.last_attempt.clone().unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        format!("molo17/gluesync-core-hub:{version}")
    );
    // The pull is in PrePull, not in the pause: Core Hub's new pod found its image on the node.
    let pull = seconds_of(&g, UpdateStep::PrePull);
    let core_hub = seconds_of(&g, UpdateStep::CoreHub);
    assert!(pull >= 15, "PrePull took {pull} s");
    assert!(
        core_hub < 10,
        "CoreHub took {core_hub} s: it waited for a pull"
    );
    let reasons = event_reasons_through(&ns, "UpdateSucceeded").await?;
    let at = |r: &str| reasons.iter().position(|x| x == r).unwrap();
    assert!(at("ImagesPrePulled") < at("PipelinesPaused"), "{reasons:?}");
    // The pods go once the step ends; the stranger's stays.
    pods_go(&ns).await?;
    assert!(
        admin.get_opt("not-gkos").await?.is_some(),
        "GKO deleted a pod it did not make"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_that_cannot_be_pulled_refuses_the_update_with_nothing_paused()
-> anyhow::Result<()> {
    let ns = namespace("pre-pull-fails").await?;
    let sim = simulator().await?;
    // A stability timeout far longer than the test's patience: the refusal comes from the pull.
    install_with_simulator(&ns, &sim, json!({"stabilityTimeoutSeconds": 3600}))?;
    let _gko = Operator::start(&ns);
    // Settled once the catalog has been read: it offers 2.3.2.2, so the phase is UpdateAvailable (GKO
    // writes Current first, before its first catalog check answers).
    let before = wait_available(&ns).await?;
    let phase = before.status.as_ref().and_then(|s| s.phase);
    patch_spec(&ns, json!({"version": "2.3.2.2-unpullable"})).await?;
    let g = wait_finished(&ns, 2).await?;
    let status = g.status.unwrap();
    let attempt = status.last_attempt.clone().unwrap();
    // The fault landed where it claims: the update ended in PrePull, before any drain, on the pre-pull
    // pod of the new image (its container waited in ImagePullBackOff, which the refusal quotes).
    use UpdateStep::*;
    assert_eq!(
        status.history[0]
            .steps
            .iter()
            .map(|s| s.step)
            .collect::<Vec<_>>(),
        [Preflight, Snapshot, PrePull]
    );
    assert_eq!(attempt.result, UpdateResult::Refused, "{attempt:?}");
    assert!(
        attempt.message.contains(
            "the image molo17/gluesync-core-hub:2.3.2.2-unpullable could not be pulled on node kwok-node-0"
        ) && attempt.message.contains("(ImagePullBackOff: Back-off pulling image")
            && attempt.message.contains("nothing was paused or changed"),
        "{}",
        attempt.message
    );
    // Refused, not rolled back: nothing was paused, Core Hub was never changed, the phase stays.
    assert!(sim.calls().enter.is_empty(), "{:?}", sim.calls().enter);
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        "molo17/gluesync-core-hub:2.3.2.1"
    );
    assert_eq!(status.phase, phase);
    assert_ne!(status.phase, Some(Phase::Failed));
    let reasons = event_reasons_through(&ns, "UpdateRefused").await?;
    assert_eq!(reasons, ["UpdateStarted", "UpdateRefused"]);
    pods_go(&ns).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gko_killed_mid_pull_leaves_the_next_one_to_finish_with_the_same_pods()
-> anyhow::Result<()> {
    let ns = namespace("pre-pull-kill").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    let mut gko = Gko::spawn(&ns, GkoOptions::default())?;
    wait_settled(&ns).await?;
    let version = slow_version(&ns);
    patch_spec(&ns, json!({"version": version})).await?;
    wait_for_step(&ns, UpdateStep::PrePull).await?;
    let uids = |pods: Vec<Pod>| -> BTreeSet<String> {
        pods.into_iter().filter_map(|p| p.metadata.uid).collect()
    };
    let made = pods_made(&ns).await?;
    let made = uids(made);
    // Killed in the middle of the pull (it takes 20 s).
    gko.kill()?;
    let g = platforms(&ns).get("gluesync").await?;
    assert_eq!(step_of(&g), Some(UpdateStep::PrePull), "killed mid-pull");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _next = Gko::spawn(&ns, GkoOptions::default())?;
    // The next GKO carries on from the status with the pods that are there: none is made again, from
    // the restart to the end of the update (the pods stay until the pipelines run again).
    let mut polls = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let g = loop {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the update did not end"
        );
        let pods = uids(pre_pull_pods(&ns).await?);
        assert!(
            pods.is_subset(&made),
            "a pod made again: {pods:?}, made {made:?}"
        );
        let g = platforms(&ns).get("gluesync").await?;
        if step_of(&g) == Some(UpdateStep::PrePull) {
            assert!(
                sim.calls().enter.is_empty(),
                "nothing paused during the pull"
            );
            polls += 1;
        }
        if g.status
            .as_ref()
            .is_some_and(|s| s.update.is_none() && !s.history.is_empty())
        {
            break g;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(polls > 0, "the next GKO was never seen pulling");
    let g = wait_finished(&ns, g.metadata.generation.unwrap_or(2)).await?;
    let status = g.status.clone().unwrap();
    let attempt = status.last_attempt.clone().unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    assert_eq!(status.history.len(), 1);
    // Each pipeline asked into maintenance mode once; none left paused.
    assert!(
        sim.calls().enter.values().all(|n| *n == 1),
        "{:?}",
        sim.calls().enter
    );
    assert_eq!(sim.calls().enter.len(), 20);
    assert_eq!(sim.in_maintenance(), ["kept-in-maintenance-00020"]);
    pods_go(&ns).await?;
    Ok(())
}
