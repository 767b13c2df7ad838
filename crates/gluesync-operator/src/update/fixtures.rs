//! Builders of the tiny fixtures the engine's tests start from: times, a platform, workloads with their
//! pods, a sample install. Built for the unit tests and, with the feature `test-hooks`, for the
//! integration tests; never in a release build.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;

use crate::{
    api::{ComponentType, FINALIZER, GluesyncPlatform, GluesyncPlatformSpec, WorkloadKind},
    update::observed::{PodView, Workload},
};

/// `secs` seconds after a fixed instant.
pub fn at(secs: i64) -> Time {
    Time(jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap())
}

/// A platform named `gluesync` in namespace `ns`, generation 2, with GKO's finalizer on.
pub fn platform(spec: serde_json::Value) -> GluesyncPlatform {
    let mut g = GluesyncPlatform::new(
        "gluesync",
        serde_json::from_value::<GluesyncPlatformSpec>(spec).unwrap(),
    );
    g.metadata = ObjectMeta {
        name: Some("gluesync".into()),
        namespace: Some("ns".into()),
        generation: Some(2),
        uid: Some("uid".into()),
        finalizers: Some(vec![FINALIZER.into()]),
        ..Default::default()
    };
    g
}

/// A labelled StatefulSet (a Deployment for Grafana), ready, with one ready pod on `image`.
pub fn workload(name: &str, label: &str, image: &str) -> Workload {
    Workload {
        kind: if name.contains("grafana") {
            WorkloadKind::Deployment
        } else {
            WorkloadKind::StatefulSet
        },
        name: name.into(),
        uid: format!("{name}-uid"),
        component_type: ComponentType::from_label(label),
        label_value: label.into(),
        container: Some("c".into()),
        image: image.into(),
        ready: true,
        progress_deadline_exceeded: false,
        rollout_blocker: None,
        self_update_mark: None,
        template: Box::default(),
        selector: Default::default(),
        pods: vec![pod(name, image, true, 0)],
    }
}

/// The pod `<workload>-0`.
pub fn pod(workload: &str, image: &str, ready: bool, restarts: i32) -> PodView {
    PodView {
        name: format!("{workload}-0"),
        uid: format!("{workload}-0-uid"),
        image: image.into(),
        ready,
        waiting: None,
        restarts,
        dr_mark: None,
    }
}

/// Core Hub, an agent, Chronos and Grafana, all ready on their old versions.
pub fn install() -> Vec<Workload> {
    vec![
        workload("core-hub", "core-hub", "molo17/gluesync-core-hub:2.3.2.1"),
        workload("agent-mssql", "agent", "molo17/gluesync-mssql-cdc:2.3.2.1"),
        workload("chronos", "module", "molo17/gluesync-chronos:0.3.2"),
        workload("grafana", "third-party", "molo17/grafana:11.2.0"),
    ]
}

/// `millis` milliseconds after the same instant as [`at`].
pub fn at_ms(millis: i64) -> Time {
    Time(jiff::Timestamp::from_millisecond(1_800_000_000_000 + millis).unwrap())
}
