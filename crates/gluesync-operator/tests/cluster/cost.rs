//! Cluster tests of GKO's cost: it follows what GKO manages, not what else runs in its namespace. Pods of
//! unrelated workloads are neither cached nor reconciled; a workload labelled later has its pods watched.
//! (The figures, memory and reconciles against the number of unrelated pods, are `make bench`'s.)

use crate::common;

use std::time::Duration;

use common::*;
use gko_test_support::eventually;
use gluesync_operator::{api::Phase, metrics::KindLabel};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod};
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::json;

/// GKO's `cached_objects{kind="Pod"}` gauge: the pods in its cache.
fn pod_gauge(gko: &Operator) -> prometheus_client::metrics::gauge::Gauge {
    gko.metrics
        .cached
        .get_or_create(&KindLabel { kind: "Pod".into() })
        .clone()
}

fn cached_pods(gko: &Operator) -> i64 {
    pod_gauge(gko).get()
}

/// Waits until GKO's cache holds `n` pods.
async fn caches_pods(gko: &Operator, n: i64, what: &str) -> anyhow::Result<()> {
    eventually(what, Duration::from_secs(30), || async {
        Ok((cached_pods(gko) == n).then_some(()))
    })
    .await
}

async fn settled(ns: &gko_test_support::TestNamespace, components: usize) -> anyhow::Result<()> {
    wait_for_platform(ns, "phase Current with every component ready", |g| {
        g.status.as_ref().is_some_and(|s| {
            s.phase == Some(Phase::Current)
                && s.components.len() == components
                && s.components.iter().all(|c| c.ready)
        })
    })
    .await?;
    Ok(())
}

/// A Deployment of `replicas` pods that GKO does not manage. Its pods carry the install's
/// `app.kubernetes.io/instance` label, as a workload of the same Helm release might.
fn unrelated(replicas: usize) -> String {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "unrelated"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": "unrelated"}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "unrelated", "app.kubernetes.io/instance": "gluesync"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}
            }
        }
    })
    .to_string()
}

/// Waits until the Deployment `unrelated` has rolled out `replicas` ready pods of its latest template.
async fn rolled_out(ns: &gko_test_support::TestNamespace, replicas: i32) -> anyhow::Result<()> {
    let api: Api<Deployment> = Api::namespaced(ns.client.clone(), &ns.name);
    eventually(
        "the unrelated Deployment rolled out",
        Duration::from_secs(120),
        || async {
            let d = api.get("unrelated").await?;
            let s = d.status.unwrap_or_default();
            Ok((s.observed_generation == d.metadata.generation
                && s.replicas == Some(replicas)
                && s.updated_replicas == Some(replicas)
                && s.ready_replicas == Some(replicas))
            .then_some(()))
        },
    )
    .await
}

async fn unrelated_pods(ns: &gko_test_support::TestNamespace) -> anyhow::Result<usize> {
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    Ok(pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=unrelated"))
        .await?
        .items
        .len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrelated_pods_are_neither_cached_nor_reconciled() -> anyhow::Result<()> {
    let ns = namespace("unrelated").await?;
    ns.apply(SAMPLE_INSTALL)?;
    ns.apply(SAMPLE_PLATFORM)?;
    let gko = Operator::start(&ns);
    settled(&ns, 4).await?;
    // Let the last status write's own event come back and be reconciled.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(cached_pods(&gko), 4, "GKO caches the sample's four pods");
    let reconciles = gko.metrics.reconciles.get();

    // Created, rolled to a new template, deleted: 40 pods each time, GKO's cache never holds one.
    let most = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let sampler = {
        let (most, gauge) = (most.clone(), pod_gauge(&gko));
        tokio::spawn(async move {
            loop {
                most.fetch_max(gauge.get(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    ns.apply(&unrelated(40))?;
    rolled_out(&ns, 40).await?;
    assert_eq!(unrelated_pods(&ns).await?, 40, "the unrelated pods run");
    let deployments: Api<Deployment> = Api::namespaced(ns.client.clone(), &ns.name);
    deployments
        .patch(
            "unrelated",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.28"}]}}}})),
        )
        .await?;
    rolled_out(&ns, 40).await?;
    deployments
        .delete("unrelated", &DeleteParams::foreground())
        .await?;
    eventually(
        "the unrelated pods gone",
        Duration::from_secs(120),
        || async { Ok((unrelated_pods(&ns).await? == 0).then_some(())) },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    sampler.abort();

    assert_eq!(
        most.load(std::sync::atomic::Ordering::Relaxed),
        4,
        "GKO cached a pod it does not manage"
    );
    assert_eq!(
        gko.metrics.reconciles.get(),
        reconciles,
        "pods GKO does not manage caused reconciles"
    );

    // A pod GKO manages does: Core Hub's pod replaced is seen.
    let pods: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    pods.delete("gluesync-gluesync-core-hub-0", &DeleteParams::default())
        .await?;
    eventually(
        "a reconcile for Core Hub's pod",
        Duration::from_secs(30),
        || async { Ok((gko.metrics.reconciles.get() > reconciles).then_some(())) },
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_labelled_later_has_its_pods_watched() -> anyhow::Result<()> {
    let ns = namespace("labelled-later").await?;
    ns.apply(SAMPLE_INSTALL)?;
    ns.apply(SAMPLE_PLATFORM)?;
    let gko = Operator::start(&ns);
    settled(&ns, 4).await?;
    assert_eq!(cached_pods(&gko), 4);

    // A module whose pods carry a label value no other workload's selector names.
    let module = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "gluesync-extra", "labels": {"com.molo17.conductor.type": "module"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app.kubernetes.io/name": "gluesync-extra"}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "gluesync-extra"}},
                "spec": {"containers": [{"name": "extra", "image": "molo17/gluesync-extra:1.0.0"}]}
            }
        }
    });
    ns.apply(&module.to_string())?;
    settled(&ns, 5).await?;
    caches_pods(&gko, 6, "GKO caching the new module's two pods").await?;

    // Unlabelled, it is no longer GKO's, nor are its pods.
    let deployments: Api<Deployment> = Api::namespaced(ns.client.clone(), &ns.name);
    deployments
        .patch(
            "gluesync-extra",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"com.molo17.conductor.type": null}}})),
        )
        .await?;
    settled(&ns, 4).await?;
    caches_pods(&gko, 4, "GKO dropping the module's pods from its cache").await?;
    Ok(())
}
