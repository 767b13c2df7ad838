//! Cluster tests of the foundation: the resource, the API server's validation of it, and a status that
//! tells what runs. Each runs on the local control plane, in a namespace of its own.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use gluesync_operator::api::{ComponentType, GluesyncPlatform, Phase};
use k8s_openapi::api::{apps::v1::StatefulSet, core::v1::Event};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;

fn component<'a>(
    g: &'a GluesyncPlatform,
    name: &str,
) -> Option<&'a gluesync_operator::api::ComponentStatus> {
    g.status
        .as_ref()?
        .components
        .iter()
        .find(|c| c.name == name)
}

fn condition(g: &GluesyncPlatform, type_: &str) -> Option<(String, String)> {
    g.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// Someone changes Chronos' image to 0.3.3: status.components follows from the watch.
async fn chronos_to_0_3_3_is_reported(ns: &gko_test_support::TestNamespace) -> anyhow::Result<()> {
    let sts: Api<StatefulSet> = Api::namespaced(ns.client.clone(), &ns.name);
    sts.patch(
        "gluesync-gluesync-chronos",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
            {"name": "chronos", "image": "molo17/gluesync-chronos:0.3.3"}
        ]}}}})),
    )
    .await?;
    wait_for_platform(ns, "the new Chronos image in status.components", |g| {
        component(g, "gluesync-gluesync-chronos").is_some_and(|c| {
            c.image == "molo17/gluesync-chronos:0.3.3" && c.version.as_deref() == Some("0.3.3")
        })
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_install_is_reported_as_it_runs() -> anyhow::Result<()> {
    let ns = namespace("sample").await?;
    ns.apply(SAMPLE_INSTALL)?;
    ns.apply(SAMPLE_PLATFORM)?;
    // GKO runs with no more than its namespaced Role.
    let gko = Operator::start_with_role(&ns).await?;

    let g = wait_for_platform(&ns, "phase Current with every component ready", |g| {
        g.status.as_ref().is_some_and(|s| {
            s.phase == Some(Phase::Current)
                && s.components.len() == 4
                && s.components.iter().all(|c| c.ready)
        })
    })
    .await?;
    let status = g.status.clone().unwrap_or_default();
    assert_eq!(status.version.as_deref(), Some("2.3.2.1"));
    assert_eq!(status.observed_generation, g.metadata.generation);
    let seen: Vec<_> = status
        .components
        .iter()
        .map(|c| {
            (
                c.name.as_str(),
                c.component_type,
                c.image.as_str(),
                c.version.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "gluesync-gluesync-core-hub",
                ComponentType::CoreHub,
                "molo17/gluesync-core-hub:2.3.2.1",
                Some("2.3.2.1")
            ),
            (
                "gluesync-gluesync-chronos",
                ComponentType::Module,
                "molo17/gluesync-chronos:0.3.2",
                Some("0.3.2")
            ),
            (
                "gluesync-gluesync-grafana",
                ComponentType::Module,
                "molo17/grafana:11.2.0",
                Some("11.2.0")
            ),
            (
                "gluesync-gluesync-prometheus",
                ComponentType::Module,
                "molo17/prometheus:2.53.0",
                Some("2.53.0")
            ),
        ]
    );
    assert_eq!(
        condition(&g, "Ready"),
        Some(("True".into(), "Available".into()))
    );
    assert_eq!(
        condition(&g, "Reconciling").map(|c| c.0),
        Some("False".into())
    );
    assert_eq!(condition(&g, "Stalled").map(|c| c.0), Some("False".into()));

    // What the user reads.
    let table = ns.kubectl(&["get", "gsp"])?;
    let mut lines = table.lines();
    let header: Vec<_> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "PHASE", "VERSION", "DESIRED", "AVAILABLE", "AGE"]
    );
    let row: Vec<_> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        &row[..4],
        ["gluesync", "Current", "2.3.2.1", "2.3.2.1"],
        "{table}"
    );
    // AVAILABLE is empty until the catalog is read, so AGE follows DESIRED.
    assert_eq!(row.len(), 5, "{table}");

    // Someone changes a workload's image: status.components follows from the watch.
    let changed = Instant::now();
    chronos_to_0_3_3_is_reported(&ns).await?;
    println!(
        "image change reflected in status.components after {:?}",
        changed.elapsed()
    );
    assert_eq!(
        gko.metrics.reconcile_errors.get(),
        0,
        "GKO lacked a right or failed"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_rejects_malformed_platforms() -> anyhow::Result<()> {
    let ns = namespace("validation").await?;
    let cases: [(&str, serde_json::Value, &str); 13] = [
        ("no version", json!({}), "spec.version: Required value"),
        (
            "version not dotted numbers",
            json!({"version": "latest"}),
            "spec.version",
        ),
        ("empty version", json!({"version": ""}), "spec.version"),
        (
            "unknown update policy",
            json!({"version": "2.3.2.1", "updatePolicy": "manual"}),
            "spec.updatePolicy",
        ),
        (
            "unknown release channel",
            json!({"version": "2.3.2.1", "releaseChannel": "stable"}),
            "spec.releaseChannel",
        ),
        (
            "negative check interval",
            json!({"version": "2.3.2.1", "checkIntervalMinutes": -1}),
            "spec.checkIntervalMinutes",
        ),
        (
            "zero drain timeout",
            json!({"version": "2.3.2.1", "drainTimeoutSeconds": 0}),
            "spec.drainTimeoutSeconds",
        ),
        (
            "negative stability window",
            json!({"version": "2.3.2.1", "stabilityWindowSeconds": -5}),
            "spec.stabilityWindowSeconds",
        ),
        (
            "window longer than timeout",
            json!({"version": "2.3.2.1", "stabilityWindowSeconds": 700, "stabilityTimeoutSeconds": 600}),
            "stabilityWindowSeconds must not be longer than stabilityTimeoutSeconds",
        ),
        (
            "module pin not a version",
            json!({"version": "2.3.2.1", "modules": {"gluesync-gluesync-chronos": "newest"}}),
            "spec.modules",
        ),
        (
            "registry with trailing slash",
            json!({"version": "2.3.2.1", "imageRegistry": "registry.example.com/"}),
            "imageRegistry",
        ),
        (
            "a CA and no verification",
            json!({"version": "2.3.2.1", "coreHub": {"caSecret": "corehub-ca", "insecureSkipVerify": true}}),
            "caSecret and insecureSkipVerify exclude each other",
        ),
        (
            "offline with a catalog url",
            json!({"version": "2.3.2.1", "catalog": {"offline": true, "url": "https://catalog.example.com"}}),
            "an offline install has no catalog url",
        ),
    ];
    for (what, spec, expected) in cases {
        let doc = json!({
            "apiVersion": "gluesync.molo17.com/v1alpha1",
            "kind": "GluesyncPlatform",
            "metadata": {"name": "bad"},
            "spec": spec,
        });
        let (ok, out) = ns.kubectl_status(&["create", "-f", "-"], Some(&doc.to_string()))?;
        assert!(!ok, "{what}: the API server accepted it");
        assert!(
            out.contains(expected),
            "{what}: expected {expected:?} in {out}"
        );
    }

    // A well-formed one is accepted, and the API server fills the documented defaults.
    let doc = json!({
        "apiVersion": "gluesync.molo17.com/v1alpha1",
        "kind": "GluesyncPlatform",
        "metadata": {"name": "gluesync"},
        "spec": {"version": "2.3.2.1", "modules": {"gluesync-gluesync-chronos": "0.3.3"}},
    });
    let (ok, out) = ns.kubectl_status(&["create", "-f", "-"], Some(&doc.to_string()))?;
    assert!(ok, "{out}");
    let g = platforms(&ns).get("gluesync").await?;
    let spec = serde_json::to_value(&g.spec)?;
    assert_eq!(spec["updatePolicy"], "ui");
    assert_eq!(spec["releaseChannel"], "ga");
    assert_eq!(spec["checkIntervalMinutes"], 360);
    assert_eq!(spec["drainTimeoutSeconds"], 300);
    assert_eq!(spec["stabilityWindowSeconds"], 60);
    assert_eq!(spec["stabilityTimeoutSeconds"], 600);

    // Status is validated too: a phase GKO does not know is refused.
    let api = platforms(&ns);
    let bad_phase = api
        .patch_status(
            "gluesync",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Exploded"}})),
        )
        .await;
    let err = bad_phase.expect_err("a status with an unknown phase was accepted");
    assert!(err.to_string().contains("status.phase"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_cluster_causes_no_status_write() -> anyhow::Result<()> {
    let ns = namespace("quiet").await?;
    ns.apply(SAMPLE_INSTALL)?;
    ns.apply(SAMPLE_PLATFORM)?;
    let gko = Operator::start(&ns);
    let settled = wait_for_platform(&ns, "a settled status", |g| {
        g.status.as_ref().is_some_and(|s| {
            s.phase == Some(Phase::Current)
                && s.components.iter().all(|c| c.ready)
                && s.components.len() == 4
        })
    })
    .await?;
    // Let the last writes' own watch events come back and be reconciled.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = platforms(&ns).get("gluesync").await?;
    let writes = gko.metrics.status_writes.get();
    let reconciles = gko.metrics.reconciles.get();
    assert!(writes >= 1, "the settled status was written by GKO");

    tokio::time::sleep(Duration::from_secs(30)).await;

    let after = platforms(&ns).get("gluesync").await?;
    assert_eq!(
        before.resource_version(),
        after.resource_version(),
        "the GluesyncPlatform changed"
    );
    assert_eq!(before.status, settled.status);
    assert_eq!(
        gko.metrics.status_writes.get(),
        writes,
        "GKO wrote status on a quiet cluster"
    );
    assert_eq!(
        gko.metrics.reconciles.get(),
        reconciles,
        "GKO reconciled on a quiet cluster"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_core_hub_or_two_are_reported_not_a_crash() -> anyhow::Result<()> {
    let ns = namespace("corehubs").await?;
    ns.apply(SAMPLE_PLATFORM)?;
    let gko = Operator::start_with_role(&ns).await?;

    let g = wait_for_platform(&ns, "Stalled: no Core Hub", |g| {
        condition(g, "Stalled") == Some(("True".into(), "CoreHubNotFound".into()))
    })
    .await?;
    let status = g.status.unwrap_or_default();
    assert_eq!(status.version, None);
    assert!(
        status
            .message
            .unwrap_or_default()
            .contains("com.molo17.conductor.type=core-hub")
    );
    wait_for_event(&ns, "CoreHubNotFound").await?;

    // Two Core Hubs: the sample's, and a second one.
    ns.apply(SAMPLE_INSTALL)?;
    let second = SAMPLE_INSTALL
        .split("---")
        .next()
        .unwrap_or_default()
        .replace("name: gluesync-gluesync-core-hub", "name: second-core-hub");
    ns.apply(&second)?;
    let g = wait_for_platform(&ns, "Stalled: two Core Hubs", |g| {
        condition(g, "Stalled") == Some(("True".into(), "MultipleCoreHubs".into()))
    })
    .await?;
    let message = g.status.and_then(|s| s.message).unwrap_or_default();
    assert!(
        message.contains("gluesync-gluesync-core-hub") && message.contains("second-core-hub"),
        "{message}"
    );
    wait_for_event(&ns, "MultipleCoreHubs").await?;

    // Removing the second one brings the install back, and GKO kept running throughout.
    ns.kubectl(&["delete", "statefulset", "second-core-hub"])?;
    wait_for_platform(&ns, "phase Current again", |g| {
        g.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(Phase::Current))
    })
    .await?;
    assert_eq!(gko.metrics.reconcile_errors.get(), 0);
    Ok(())
}

async fn wait_for_event(
    ns: &gko_test_support::TestNamespace,
    reason: &str,
) -> anyhow::Result<Event> {
    let events: Api<Event> = Api::namespaced(ns.client.clone(), &ns.name);
    gko_test_support::eventually(
        &format!("a Warning event {reason}"),
        Duration::from_secs(30),
        || {
            let events = events.clone();
            async move {
                let list = events
                    .list(&ListParams::default().fields("involvedObject.kind=GluesyncPlatform"))
                    .await?;
                Ok(list.items.into_iter().find(|e| {
                    e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning")
                }))
            }
        },
    )
    .await
}

/// A GluesyncPlatform that the API server accepts but GKO's types do not (as when the CRD and GKO's
/// release drift apart) is said once as a Warning event, poisons nothing, and is reconciled again once it
/// is fixed. The API server takes `2026-12-02T10:00:00.1234567891Z` as a `date-time` (Kubernetes' format
/// checker allows any number of fractional digits); GKO's timestamps allow nine at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_platform_that_does_not_parse_is_said_once_and_read_again_when_fixed()
-> anyhow::Result<()> {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let ns = namespace("unparsed").await?;
    ns.apply(SAMPLE_INSTALL)?;
    ns.apply(SAMPLE_PLATFORM)?;
    let gko = Operator::start(&ns);
    wait_for_platform(&ns, "phase Current", |g| {
        g.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(Phase::Current))
    })
    .await?;

    let attempt = |finished: &str| json!({"status": {"lastAttempt": {"result": "Succeeded", "message": "by hand", "finishedAt": finished}}});
    platforms(&ns)
        .patch_status(
            "gluesync",
            &PatchParams::default(),
            &Patch::Merge(attempt("2026-12-02T10:00:00.1234567891Z")),
        )
        .await
        .map(|_| ())
        .or_else(|e| match e {
            // The client's own parse of the answer fails: the fault is in place.
            kube::Error::SerdeError(_) => Ok(()),
            e => Err(e),
        })?;
    // The fault landed: the API server holds the object, and it does not parse as a GluesyncPlatform.
    let gvk = GroupVersionKind::gvk("gluesync.molo17.com", "v1alpha1", "GluesyncPlatform");
    let raw: Api<DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &ApiResource::from_gvk(&gvk));
    let stored = raw.get("gluesync").await?;
    assert_eq!(
        stored.data["status"]["lastAttempt"]["finishedAt"],
        "2026-12-02T10:00:00.1234567891Z"
    );
    let parsed = serde_json::from_value::<GluesyncPlatform>(serde_json::to_value(&stored)?);
    assert!(parsed.is_err(), "the stored object parses: {parsed:?}");

    let event = wait_for_event(&ns, "InvalidResource").await?;
    let note = event.message.unwrap_or_default();
    assert!(
        note.starts_with("GKO cannot read this GluesyncPlatform")
            && note.contains("changes nothing"),
        "{note}"
    );
    // Workload changes reconcile every platform: the same version is not said again.
    let sts: Api<StatefulSet> = Api::namespaced(ns.client.clone(), &ns.name);
    for n in 0..3 {
        sts.patch(
            "gluesync-gluesync-chronos",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": n.to_string()}}})),
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let said: Vec<Event> = Api::<Event>::namespaced(ns.client.clone(), &ns.name)
        .list(&ListParams::default().fields("involvedObject.kind=GluesyncPlatform"))
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("InvalidResource"))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(
        said[0].count.unwrap_or(1),
        1,
        "said more than once: {said:?}"
    );

    // Fixed, it is read again: a workload change reaches status.components.
    platforms(&ns)
        .patch_status(
            "gluesync",
            &PatchParams::default(),
            &Patch::Merge(attempt("2026-12-02T10:00:00Z")),
        )
        .await?;
    chronos_to_0_3_3_is_reported(&ns).await?;
    assert_eq!(gko.metrics.reconcile_errors.get(), 0);
    Ok(())
}
