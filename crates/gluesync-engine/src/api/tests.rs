use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResourceExt;
use serde::Serialize;

use super::*;

#[test]
fn spec_defaults_match_the_docs() {
    let spec: GluesyncPlatformSpec =
        serde_json::from_value(serde_json::json!({"version": "2.3.2.1"})).unwrap();
    assert_eq!(spec.update_policy, UpdatePolicy::Ui);
    assert_eq!(spec.release_channel, ReleaseChannel::Ga);
    assert_eq!(spec.check_interval_minutes, 360);
    assert_eq!(spec.drain_timeout_seconds, 300);
    assert_eq!(spec.stability_window_seconds, 60);
    assert_eq!(spec.stability_timeout_seconds, 600);
    assert!(spec.self_update.enabled);
    assert!(!spec.catalog.offline);
}

#[test]
fn printer_columns_are_the_documented_ones() {
    let crd = GluesyncPlatform::crd();
    let columns: Vec<_> = crd.spec.versions[0]
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.name.to_uppercase(), c.priority.unwrap_or(0)))
        .collect();
    // The product docs' columns by default; the step and the message with `-o wide` only.
    let default: Vec<_> = columns
        .iter()
        .filter(|c| c.1 == 0)
        .map(|c| c.0.as_str())
        .collect();
    assert_eq!(default, ["PHASE", "VERSION", "DESIRED", "AVAILABLE", "AGE"]);
    let wide: Vec<_> = columns
        .iter()
        .filter(|c| c.1 == 1)
        .map(|c| c.0.as_str())
        .collect();
    assert_eq!(wide, ["STEP", "MESSAGE"]);
}

#[test]
fn wire_names_are_the_documented_ones() {
    let result = ComponentResult {
        name: "x".into(),
        status: ComponentResultStatus::RolledBack,
        from: None,
        to: None,
        message: None,
    };
    assert_eq!(
        serde_json::to_value(&result).unwrap()["status"],
        "ROLLED_BACK"
    );
    assert_eq!(
        serde_json::to_value(ComponentType::ThirdParty).unwrap(),
        "third-party"
    );
    let spec: GluesyncPlatformSpec = serde_json::from_value(
        serde_json::json!({"version": "1", "requestID": "r1", "updatePolicy": "gitops"}),
    )
    .unwrap();
    assert_eq!(spec.request_id.as_deref(), Some("r1"));
    assert_eq!(spec.update_policy, UpdatePolicy::Gitops);
}

/// The names GKO prints, labels with and builds condition reasons from are the wire names the
/// status and the spec carry, and a label names its component type back.
#[test]
fn the_names_gko_says_are_the_wire_names() {
    fn wire(v: impl Serialize) -> String {
        serde_json::to_value(v)
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    }
    /// A value's name as GKO says it, beside its name on the wire.
    fn named<T: Serialize + Copy>(v: T, name: fn(T) -> &'static str) -> (&'static str, String) {
        (name(v), wire(v))
    }
    use DisasterRecoveryPhase as Dr;
    let said: Vec<(&str, String)> = [
        named(ReleaseChannel::Ga, ReleaseChannel::as_str),
        named(ReleaseChannel::Beta, ReleaseChannel::as_str),
        named(ReleaseChannel::Alpha, ReleaseChannel::as_str),
        named(Phase::Current, Phase::as_str),
        named(Phase::UpdateAvailable, Phase::as_str),
        named(Phase::Updating, Phase::as_str),
        named(Phase::Degraded, Phase::as_str),
        named(Phase::Failed, Phase::as_str),
        named(SelfUpdatePhase::Scheduled, SelfUpdatePhase::as_str),
        named(SelfUpdatePhase::RollingOut, SelfUpdatePhase::as_str),
        named(SelfUpdatePhase::RollingBack, SelfUpdatePhase::as_str),
        named(DisasterRecoveryRole::Primary, DisasterRecoveryRole::as_str),
        named(
            DisasterRecoveryRole::Secondary,
            DisasterRecoveryRole::as_str,
        ),
        named(ServiceType::LoadBalancer, ServiceType::as_str),
        named(ServiceType::NodePort, ServiceType::as_str),
        named(ServiceType::ClusterIP, ServiceType::as_str),
        named(Dr::SettingUp, Dr::as_str),
        named(Dr::Active, Dr::as_str),
        named(Dr::RollingBack, Dr::as_str),
        named(Dr::Failed, Dr::as_str),
        named(Dr::TearingDown, Dr::as_str),
    ]
    .into();
    for (name, on_the_wire) in &said {
        assert_eq!(name, on_the_wire);
    }
    let names: Vec<&str> = said.iter().map(|s| s.0).collect();
    assert_eq!(
        names,
        [
            "ga",
            "beta",
            "alpha",
            "Current",
            "UpdateAvailable",
            "Updating",
            "Degraded",
            "Failed",
            "Scheduled",
            "RollingOut",
            "RollingBack",
            "primary",
            "secondary",
            "LoadBalancer",
            "NodePort",
            "ClusterIP",
            "SettingUp",
            "Active",
            "RollingBack",
            "Failed",
            "TearingDown"
        ]
    );
    // The component types, by their `com.molo17.conductor.type` label.
    for (t, label) in [
        (ComponentType::CoreHub, "core-hub"),
        (ComponentType::Agent, "agent"),
        (ComponentType::Module, "module"),
        (ComponentType::ThirdParty, "third-party"),
        (ComponentType::Operator, "operator"),
    ] {
        assert_eq!((t.as_label(), wire(t)), (label, label.to_string()));
        assert_eq!(ComponentType::from_label(label), Some(t));
    }
    assert_eq!(ComponentType::from_label("database"), None);
}

/// Each step says which it is, when it began and the deadline it has (Waiting's only while an
/// approval is awaited; none for Snapshot, Modules and Finish); Drain alone carries the pipelines
/// it asked.
#[test]
fn a_step_says_its_name_start_deadline_and_asked_pipelines() {
    let t = |s: i64| Time(jiff::Timestamp::from_second(1_800_000_000 + s).unwrap());
    let (since, deadline) = (t(1), t(2));
    let asked: PipelineList = ["p1", "p2"].into_iter().collect();
    let (s, d) = (|| since.clone(), || deadline.clone());
    let steps = [
        (
            Step::Preflight {
                since: s(),
                deadline: d(),
            },
            UpdateStep::Preflight,
            true,
        ),
        (Step::Snapshot { since: s() }, UpdateStep::Snapshot, false),
        (
            Step::PrePull {
                since: s(),
                deadline: d(),
            },
            UpdateStep::PrePull,
            true,
        ),
        (
            Step::Waiting {
                since: s(),
                deadline: Some(d()),
            },
            UpdateStep::Waiting,
            true,
        ),
        (
            Step::Waiting {
                since: s(),
                deadline: None,
            },
            UpdateStep::Waiting,
            false,
        ),
        (
            Step::Drain {
                since: s(),
                deadline: d(),
                asked_pipelines: Some(asked.clone()),
            },
            UpdateStep::Drain,
            true,
        ),
        (
            Step::CoreHub {
                since: s(),
                deadline: d(),
            },
            UpdateStep::CoreHub,
            true,
        ),
        (
            Step::CoreHubRollback {
                since: s(),
                deadline: d(),
            },
            UpdateStep::CoreHubRollback,
            true,
        ),
        (
            Step::Resume {
                since: s(),
                deadline: d(),
            },
            UpdateStep::Resume,
            true,
        ),
        (Step::Modules { since: s() }, UpdateStep::Modules, false),
        (Step::Finish { since: s() }, UpdateStep::Finish, false),
    ];
    for (mut step, name, has_deadline) in steps {
        assert_eq!(step.name(), name);
        assert_eq!(step.since(), &since, "{name:?}");
        assert_eq!(
            step.deadline(),
            has_deadline.then_some(&deadline),
            "{name:?}"
        );
        let drain = name == UpdateStep::Drain;
        assert_eq!(step.asked_pipelines(), drain.then_some(&asked), "{name:?}");
        let list = step.asked_pipelines_mut();
        assert_eq!(list.is_some(), drain, "{name:?}");
        list.into_iter().for_each(|l| l.push("p3"));
        let now: Option<Vec<&str>> = step
            .asked_pipelines()
            .map(|l| l.iter().map(|p| p.as_str()).collect());
        assert_eq!(now, drain.then(|| vec!["p1", "p2", "p3"]), "{name:?}");
    }
    // A Drain written by a release that kept no such record carries none.
    let old = Step::Drain {
        since: s(),
        deadline: d(),
        asked_pipelines: None,
    };
    assert_eq!(old.asked_pipelines(), None);
}
