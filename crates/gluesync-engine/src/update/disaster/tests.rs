//! The disaster-recovery steps' tests: setups, teardowns and rollbacks decided on small worlds.

use serde_json::{Value, json};

use super::patch::*;
use super::*;
use crate::api::Reason;
use crate::api::{DisasterRecoveryRole, DisasterRecoveryService};
use crate::update::fixtures::{at, let_go_before, observed, pod};
use crate::update::observed::PodView;

fn core_hub(template: Value) -> Workload {
    Workload {
        kind: WorkloadKind::StatefulSet,
        name: "core-hub".into(),
        uid: "u".into(),
        component_type: Some(ComponentType::CoreHub),
        label_value: "core-hub".into(),
        container: Some("c".into()),
        image: "molo17/gluesync-core-hub:2.3.2.1".into(),
        ready: true,
        progress_deadline_exceeded: false,
        rollout_blocker: None,
        pods: vec![],
        self_update_mark: None,
        template: Box::new(serde_json::from_value(template).unwrap()),
        selector: Default::default(),
    }
}

fn spec() -> DisasterRecoverySpec {
    DisasterRecoverySpec {
        role: DisasterRecoveryRole::Primary,
        peer_address: "peer".into(),
        replication_port: 1718,
        control_port: 1719,
        secret_name: None,
        revision: None,
        service: DisasterRecoveryService::default(),
    }
}

fn gsp() -> GluesyncPlatform {
    let mut g = GluesyncPlatform::new(
        "gluesync",
        serde_json::from_value(json!({"version": "2.3.2.1"})).unwrap(),
    );
    g.metadata.namespace = Some("ns".into());
    g
}

fn component(w: &Workload) -> DisasterRecoveryComponent {
    DisasterRecoveryComponent {
        name: w.name.clone(),
        kind: w.kind,
        container: "c".into(),
        original: serde_json::to_string(&env_now(w, "c")).unwrap(),
        state: State::RollingOut,
        changed_at: None,
        stable: None,
        message: None,
    }
}

#[test]
fn an_entry_that_was_there_before_is_put_back_as_it_was_and_the_rest_leaves() {
    let before = core_hub(json!({"spec": {"containers": [{"name": "c", "env": [
        {"name": "A", "value": "1"},
        {"name": "GLUESYNC_DR_ROLE", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "role"}}},
    ]}]}}));
    let c = component(&before);
    let set = patch(&gsp(), &before, &c, Some((&spec(), "primary-x")));
    let env = &set["spec"]["template"]["spec"]["containers"][0]["env"];
    let role = env
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "GLUESYNC_DR_ROLE")
        .unwrap();
    assert_eq!(role["value"], "primary");
    assert!(
        role["valueFrom"].is_null() && role.get("valueFrom").is_some(),
        "valueFrom is removed: {role}"
    );
    assert_eq!(
        set["spec"]["template"]["metadata"]["annotations"][DR_ANNOTATION],
        "primary-x"
    );

    // The workload as the setup left it.
    let after = core_hub(json!({
        "metadata": {"annotations": {DR_ANNOTATION: "primary-x"}},
        "spec": {"containers": [{"name": "c",
            "env": [{"name": "A", "value": "1"}, {"name": "GLUESYNC_DR_ROLE", "value": "primary"},
                    {"name": "GLUESYNC_DR_ENABLED", "value": "true"}],
            "ports": [{"name": "dr-replication", "containerPort": 1718}, {"name": "dr-control", "containerPort": 1719}],
            "volumeMounts": [{"name": VOLUME, "mountPath": MOUNT_PATH}]}],
            "volumes": [{"name": VOLUME, "secret": {"secretName": "s"}}]}}));
    assert!(!clean(&after, &c));
    let back = patch(&gsp(), &after, &c, None);
    let t = &back["spec"]["template"];
    assert!(t["metadata"]["annotations"][DR_ANNOTATION].is_null());
    let env = t["spec"]["containers"][0]["env"].as_array().unwrap();
    let role = env
        .iter()
        .find(|e| e["name"] == "GLUESYNC_DR_ROLE")
        .unwrap();
    assert_eq!(
        role["valueFrom"]["configMapKeyRef"]["key"], "role",
        "put back as it was"
    );
    assert!(
        role["value"].is_null() && role.get("value").is_some(),
        "the value set goes: {role}"
    );
    let enabled = env
        .iter()
        .find(|e| e["name"] == "GLUESYNC_DR_ENABLED")
        .unwrap();
    assert_eq!(enabled["$patch"], "delete");
    assert!(
        !env.iter().any(|e| e["name"] == "A"),
        "untouched entries are not in the patch"
    );
    let ports = t["spec"]["containers"][0]["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 2);
    assert!(ports.iter().all(|p| p["$patch"] == "delete"));
    assert_eq!(t["spec"]["volumes"][0]["$patch"], "delete");
    assert_eq!(
        t["spec"]["containers"][0]["volumeMounts"][0]["$patch"],
        "delete"
    );
    assert!(clean(&before, &c));
}

#[test]
fn a_template_with_the_setups_ports_that_gko_did_not_put_there_is_refused() {
    let by_hand = core_hub(json!({"spec": {"containers": [{"name": "c",
        "ports": [{"name": "dr-replication", "containerPort": 1718}]}]}}));
    let why = collision(&by_hand, "c", &spec()).expect("refused");
    assert!(why.contains("by hand"), "{why}");
    let udp = core_hub(json!({"spec": {"containers": [{"name": "c",
        "ports": [{"containerPort": 1719, "protocol": "UDP"}]}]}}));
    assert!(collision(&udp, "c", &spec()).is_some());
    let plain = core_hub(json!({"spec": {"containers": [{"name": "c",
        "ports": [{"containerPort": 1717}]}]}}));
    assert_eq!(collision(&plain, "c", &spec()), None);
    // A port is the setup's by its name alone, whatever its number.
    for name in ["dr-replication", "dr-control"] {
        let named = core_hub(json!({"spec": {"containers": [{"name": "c",
            "ports": [{"name": name, "containerPort": 9999}]}]}}));
        let why = collision(&named, "c", &spec()).expect(name);
        assert!(
            why.contains(&format!("container port 9999 ({name})")),
            "{why}"
        );
    }
    let http = core_hub(json!({"spec": {"containers": [{"name": "c",
        "ports": [{"name": "http", "containerPort": 8080}]}]}}));
    assert_eq!(collision(&http, "c", &spec()), None);
    // The same ports under GKO's mark are a setup of GKO's, which a new setup may change.
    let by_gko = core_hub(json!({
        "metadata": {"annotations": {DR_ANNOTATION: "primary-0123"}},
        "spec": {"containers": [{"name": "c",
            "ports": [{"name": "dr-replication", "containerPort": 1718}]}]}}));
    assert_eq!(by_gko.dr_mark(), Some("primary-0123"));
    assert_eq!(collision(&by_gko, "c", &spec()), None);
}

/// A status whose disaster-recovery setup `setup` is in `phase`, changing one component.
fn with_setup(
    phase: Phase,
    setup: &str,
    c: DisasterRecoveryComponent,
) -> crate::api::GluesyncPlatformStatus {
    crate::api::GluesyncPlatformStatus {
        disaster_recovery: Some(DisasterRecoveryStatus {
            phase,
            role: DisasterRecoveryRole::Primary,
            peer_address: "peer".into(),
            setup: setup.into(),
            secret_name: "s".into(),
            service: None,
            service_settings: None,
            service_selector: Default::default(),
            message: format!("the setup is {}", phase.as_str()),
            failure: None,
            since: at(0),
            components: vec![c],
        }),
        ..Default::default()
    }
}

/// Core Hub before any setup: its container alone.
fn before_setup() -> Workload {
    core_hub(json!({"spec": {"containers": [{"name": "c"}]}}))
}

/// Core Hub as a setup left it (its mark and one variable), its pod up on it.
fn left_by_setup() -> Workload {
    carrying("primary-x", true)
}

/// The decision at second `t` on these workloads.
fn decide_at(g: &GluesyncPlatform, workloads: &[Workload], t: i64) -> Decision {
    decide_seeing(g, workloads, t, DrObjects::default())
}

/// The decision at second `t` on these workloads, the pair's Secret and Service as `dr` says.
fn decide_seeing(g: &GluesyncPlatform, workloads: &[Workload], t: i64, dr: DrObjects) -> Decision {
    let report = Default::default();
    crate::update::decide(
        g,
        &Observed {
            dr,
            ..observed(workloads, &report, at(t))
        },
    )
}

/// Decides at second `t` and keeps the status the decision writes, as GKO does; returns the
/// decision and the setup it leaves.
fn decide_and_write(
    g: &mut GluesyncPlatform,
    workloads: &[Workload],
    t: i64,
    dr: DrObjects,
) -> (Decision, Option<DisasterRecoveryStatus>) {
    let d = decide_seeing(g, workloads, t, dr);
    g.status = Some(d.status.clone());
    let setup = d.status.disaster_recovery.clone();
    (d, setup)
}

/// A platform that wants the setup `spec()`, with a 10 s stability window and a 60 s timeout; and
/// the setup's mark.
fn wanting() -> (GluesyncPlatform, String) {
    let mut g = gsp();
    g.spec.disaster_recovery = Some(spec());
    g.spec.stability_window_seconds = 10;
    g.spec.stability_timeout_seconds = 60;
    g.metadata.finalizers = Some(vec![crate::api::FINALIZER.into()]);
    let mark = setup_mark(&g, &spec());
    (g, mark)
}

/// `w` with one pod, ready or not, on the setup `mark` or on none.
fn with_pod(mut w: Workload, ready: bool, mark: Option<&str>) -> Workload {
    w.ready = ready;
    w.pods = vec![PodView {
        dr_mark: mark.map(Into::into),
        ..pod(&w.name, &w.image, ready, 0)
    }];
    w
}

/// Core Hub whose template carries the setup `mark` (and one of its variables), its pod on it,
/// ready or not.
fn carrying(mark: &str, ready: bool) -> Workload {
    let w = core_hub(json!({
        "metadata": {"annotations": {DR_ANNOTATION: mark}},
        "spec": {"containers": [{"name": "c",
            "env": [{"name": "GLUESYNC_DR_ENABLED", "value": "true"}]}]}}));
    with_pod(w, ready, Some(mark))
}

/// Core Hub as it was before the setup, its pod ready or not, on the setup `mark` or on none.
fn put_back(ready: bool, mark: Option<&str>) -> Workload {
    with_pod(before_setup(), ready, mark)
}

/// `w` (built as Core Hub) as the Chronos module.
fn as_chronos(w: Workload) -> Workload {
    let pods = w
        .pods
        .iter()
        .map(|p| PodView {
            name: "chronos-0".into(),
            uid: "chronos-0-uid".into(),
            ..p.clone()
        })
        .collect();
    Workload {
        name: "chronos".into(),
        uid: "chronos-uid".into(),
        component_type: Some(ComponentType::Module),
        label_value: "chronos".into(),
        image: "molo17/gluesync-chronos:0.3.2".into(),
        pods,
        ..w
    }
}

/// The pair's Secret as `secret`, its Service there or not.
fn objects(secret: SecretState, service: bool) -> DrObjects {
    DrObjects { secret, service }
}

/// A Secret of the user's holding the shared secret.
fn users() -> SecretState {
    SecretState::Present { made_by_gko: false }
}

/// The events of `d` with this reason: (warning, message).
fn said(d: &Decision, reason: Reason) -> Vec<(bool, String)> {
    d.events
        .iter()
        .filter(|e| e.reason == reason)
        .map(|e| (e.warning, e.message.clone()))
        .collect()
}

/// The workloads `d` patches, by name.
fn patched(d: &Decision) -> Vec<&str> {
    d.actions
        .iter()
        .filter_map(|a| match a {
            Action::PatchWorkload { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect()
}

/// The patch `d` makes to the workload `name`.
fn patch_of<'d>(d: &'d Decision, name: &str) -> Option<&'d Value> {
    d.actions.iter().find_map(|a| match a {
        Action::PatchWorkload { name: n, patch, .. } if n == name => Some(patch),
        _ => None,
    })
}

/// The Services `d` writes.
fn services(d: &Decision) -> Vec<&k8s_openapi::api::core::v1::Service> {
    d.actions
        .iter()
        .filter_map(|a| match a {
            Action::ApplyService(s) => Some(&**s),
            _ => None,
        })
        .collect()
}

/// What `d` asks removed of what a setup made.
fn removes(d: &Decision) -> Vec<&Action> {
    d.actions
        .iter()
        .filter(|a| matches!(a, Action::RemoveMade(..)))
        .collect()
}

/// The pods `d` deletes.
fn deleted(d: &Decision) -> Vec<&str> {
    d.actions
        .iter()
        .filter_map(|a| match a {
            Action::DeletePod(p) => Some(p.as_str()),
            _ => None,
        })
        .collect()
}

/// `d` patches no workload, writes no Service, removes nothing a setup made and deletes no pod.
fn changes_nothing(d: &Decision) -> bool {
    patched(d).is_empty()
        && services(d).is_empty()
        && removes(d).is_empty()
        && deleted(d).is_empty()
}

/// `d` says nothing of disaster recovery.
fn says_nothing_of_the_pair(d: &Decision) -> bool {
    d.events
        .iter()
        .all(|e| !<&str>::from(e.reason).starts_with("DisasterRecovery"))
}

/// A setup changes Core Hub and every Chronos (by its image's name, whatever its registry), no other
/// module.
#[test]
fn a_setup_changes_core_hub_and_every_chronos_only() {
    use crate::update::fixtures::{install, workload};
    let mut w = install();
    w.push(workload(
        "chronos-eu",
        "module",
        "registry.example.com/molo17/gluesync-chronos:0.3.2",
    ));
    w.push(workload("prometheus", "module", "molo17/prometheus:2.53.0"));
    let report = Default::default();
    let all = targets(&observed(&w, &report, at(0))).unwrap();
    let names: Vec<&str> = all.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["core-hub", "chronos", "chronos-eu"]);
}

/// An update the spec asks for waits while a setup changes workloads, and the status says what the
/// setup does; once the pair is active, the update starts.
#[test]
fn an_update_waits_while_a_setup_changes_workloads() {
    let mut g = gsp();
    g.spec.version = "2.3.2.2".into();
    g.spec.disaster_recovery = Some(spec());
    let mark = setup_mark(&g, &spec());
    let w = before_setup();
    for phase in [Phase::SettingUp, Phase::RollingBack, Phase::TearingDown] {
        // Setting up, Core Hub is not changed yet; put back, it still carries the setup.
        let now = match phase {
            Phase::SettingUp => w.clone(),
            _ => left_by_setup(),
        };
        g.status = Some(with_setup(phase, &mark, component(&w)));
        let d = decide_at(&g, &[now], 0);
        assert!(
            d.status.update.is_none(),
            "{phase:?}: {:?}",
            d.status.update
        );
        let reconciling = d
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == RECONCILING)
            .unwrap();
        assert_eq!(
            (reconciling.status.as_str(), reconciling.reason.as_str()),
            (
                "True",
                format!("DisasterRecovery{}", phase.as_str()).as_str()
            ),
        );
    }
    g.status = Some(with_setup(Phase::Active, &mark, component(&w)));
    let d = decide_at(&g, &[w], 0);
    assert!(
        d.status.update.is_some(),
        "the update starts once the pair is active"
    );
}

/// A deleted platform whose teardown cannot put a workload back (its patch never lands) keeps GKO's
/// finalizer for the pipelines' deadline and four stability timeouts after the deletion, then goes,
/// and says what was left.
#[test]
fn a_teardown_that_never_ends_holds_a_deleted_platform_four_stability_timeouts() {
    let mut g = gsp();
    g.spec.drain_timeout_seconds = 30;
    g.spec.stability_timeout_seconds = 60;
    g.metadata.finalizers = Some(vec![crate::api::FINALIZER.into()]);
    g.metadata.deletion_timestamp = Some(at(0));
    // Core Hub as it was before the setup, and as the setup left it; the teardown began as the
    // platform was deleted.
    let before = before_setup();
    let mut c = component(&before);
    c.state = State::Restoring;
    c.changed_at = Some(at(0));
    let after = left_by_setup();
    assert!(!clean(&after, &c));
    g.status = Some(with_setup(Phase::TearingDown, "primary-x", c));
    let workloads = [after];
    let decide = |t: i64| decide_at(&g, &workloads, t);
    for t in [1, 31, 95, 269] {
        let d = decide(t);
        assert!(
            d.actions
                .iter()
                .any(|a| matches!(a, Action::PatchWorkload { .. })),
            "at {t} s the teardown puts the workload back: {:?}",
            d.actions
        );
        assert!(
            !d.actions.contains(&Action::RemoveFinalizer),
            "let go at {t} s"
        );
    }
    let warning = let_go_before(&decide(270), "the disaster-recovery teardown");
    assert!(warning.contains("four stability timeouts"), "{warning}");
}

/// The pair's Secret is `<platform>-disaster-recovery` unless the spec names one, and the setup
/// mounts that one; the Service is `<platform>-disaster-recovery`.
#[test]
fn the_pairs_secret_and_service_are_named_after_the_platform() {
    let mut g = gsp();
    g.metadata.name = Some("prod".into());
    let mut s = spec();
    assert_eq!(secret_name(&g, &s), "prod-disaster-recovery");
    assert_eq!(default_secret_name(&g), "prod-disaster-recovery");
    assert_eq!(service_name(&g), "prod-disaster-recovery");
    s.secret_name = Some("dr-shared".into());
    assert_eq!(secret_name(&g, &s), "dr-shared");
    assert_eq!(default_secret_name(&g), "prod-disaster-recovery");
    let w = before_setup();
    let set = patch(&g, &w, &component(&w), Some((&s, "primary-x")));
    assert_eq!(
        set["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
        "dr-shared"
    );
}

#[test]
fn the_setup_mark_changes_with_what_changes_the_pods_only() {
    let g = gsp();
    let a = setup_mark(&g, &spec());
    assert!(a.starts_with("primary-"));
    let mut s = spec();
    s.service.annotations.insert("x".into(), "y".into());
    assert_eq!(
        setup_mark(&g, &s),
        a,
        "Service settings do not roll the pods"
    );
    s.revision = Some("r2".into());
    assert_ne!(setup_mark(&g, &s), a);
    let mut s = spec();
    s.peer_address = "other".into();
    assert_ne!(setup_mark(&g, &s), a);
}

/// The Service publishes both ports to Core Hub's pods with the spec's settings; settings of an
/// external Service (node ports, traffic policy) and of a load balancer only where they apply.
#[test]
fn the_service_publishes_both_ports_with_the_settings_that_apply_to_its_type() {
    use crate::api::ServiceType;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let mut g = gsp();
    g.metadata.uid = Some("uid".into());
    let mut core = before_setup();
    core.selector = [("app".to_string(), "core-hub".to_string())].into();
    let mut s = spec();
    s.service = DisasterRecoveryService {
        type_: ServiceType::LoadBalancer,
        annotations: [("lb".to_string(), "internal".to_string())].into(),
        load_balancer_class: Some("cloud".into()),
        load_balancer_source_ranges: vec!["10.0.0.0/8".into()],
        external_traffic_policy: Some("Local".into()),
        replication_node_port: Some(31718),
        control_node_port: Some(31719),
    };
    let lb = service(&g, &s, &core);
    let meta = &lb.metadata;
    assert_eq!(meta.name.as_deref(), Some("gluesync-disaster-recovery"));
    assert_eq!(meta.namespace.as_deref(), Some("ns"));
    let labels = meta.labels.clone().unwrap();
    assert_eq!(labels[MANAGED_BY.0], MANAGED_BY.1);
    assert_eq!(labels[PLATFORM_LABEL], "gluesync");
    let owner = &meta.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.name.as_str(), owner.controller),
        ("gluesync", Some(true))
    );
    assert_eq!(meta.annotations.clone().unwrap()["lb"], "internal");
    let ls = lb.spec.unwrap();
    assert_eq!(ls.type_.as_deref(), Some("LoadBalancer"));
    assert_eq!(ls.selector, Some(core.selector.clone()));
    let ports: Vec<_> = ls
        .ports
        .unwrap()
        .into_iter()
        .map(|p| {
            (
                p.name.unwrap(),
                p.port,
                p.target_port,
                p.protocol,
                p.node_port,
            )
        })
        .collect();
    assert_eq!(
        ports,
        [
            (
                "dr-replication".to_string(),
                1718,
                Some(IntOrString::Int(1718)),
                Some("TCP".to_string()),
                Some(31718)
            ),
            (
                "dr-control".to_string(),
                1719,
                Some(IntOrString::Int(1719)),
                Some("TCP".to_string()),
                Some(31719)
            ),
        ]
    );
    assert_eq!(ls.load_balancer_class.as_deref(), Some("cloud"));
    assert_eq!(
        ls.load_balancer_source_ranges,
        Some(vec!["10.0.0.0/8".to_string()])
    );
    assert_eq!(ls.external_traffic_policy.as_deref(), Some("Local"));

    // A NodePort Service keeps the node ports and the traffic policy, not the load balancer's.
    s.service.type_ = ServiceType::NodePort;
    let np = service(&g, &s, &core).spec.unwrap();
    assert_eq!(np.type_.as_deref(), Some("NodePort"));
    assert_eq!(np.ports.unwrap()[1].node_port, Some(31719));
    assert_eq!(np.external_traffic_policy.as_deref(), Some("Local"));
    assert_eq!(
        (np.load_balancer_class, np.load_balancer_source_ranges),
        (None, None)
    );

    // A ClusterIP Service has none of them; no annotations, no annotations map.
    s.service.type_ = ServiceType::ClusterIP;
    s.service.annotations.clear();
    let ip = service(&g, &s, &core);
    assert_eq!(ip.metadata.annotations, None);
    let ip = ip.spec.unwrap();
    assert_eq!(ip.type_.as_deref(), Some("ClusterIP"));
    assert!(ip.ports.unwrap().iter().all(|p| p.node_port.is_none()));
    assert_eq!(
        (
            ip.load_balancer_class,
            ip.load_balancer_source_ranges,
            ip.external_traffic_policy
        ),
        (None, None, None)
    );

    // A load balancer without source ranges leaves them to the cloud.
    s.service.type_ = ServiceType::LoadBalancer;
    s.service.load_balancer_source_ranges.clear();
    assert_eq!(
        service(&g, &s, &core)
            .spec
            .unwrap()
            .load_balancer_source_ranges,
        None
    );
}

/// Core Hub gets the setup (the step written before the change is made), passes its stability
/// check on it, and only then is the Service published; the pair is active once the Service is there.
#[test]
fn a_setup_rolls_core_hub_then_publishes_the_service_then_is_active() {
    let (mut g, mark) = wanting();
    let before = [before_setup()];
    let (d, dr) = decide_and_write(&mut g, &before, 0, objects(users(), false));
    let dr = dr.unwrap();
    assert_eq!(dr.phase, Phase::SettingUp);
    assert_eq!(dr.components[0].original, "[]");
    assert!(d.again);
    assert_eq!(
        said(&d, Reason::DisasterRecoveryStarted),
        [(false, dr.message.clone())]
    );
    // The component rolls out: the change is written first, then made.
    let (d, dr) = decide_and_write(&mut g, &before, 1, objects(users(), false));
    assert_eq!(dr.unwrap().components[0].state, State::RollingOut);
    assert!(changes_nothing(&d), "{:?}", d.actions);
    let (d, _) = decide_and_write(&mut g, &before, 2, objects(users(), false));
    let given = patch_of(&d, "core-hub").expect("Core Hub is given the setup");
    assert_eq!(
        given["spec"]["template"]["metadata"]["annotations"][DR_ANNOTATION],
        mark.as_str()
    );
    // On the setup, ready: the stability window runs; no Service before it ends.
    let on_setup = [carrying(&mark, true)];
    let (d, dr) = decide_and_write(&mut g, &on_setup, 3, objects(users(), false));
    let dr = dr.unwrap();
    assert_eq!(dr.components[0].state, State::RollingOut);
    assert!(dr.message.contains("core-hub rolls out"), "{}", dr.message);
    assert!(changes_nothing(&d), "{:?}", d.actions);
    let (d, dr) = decide_and_write(&mut g, &on_setup, 13, objects(users(), false));
    assert_eq!(dr.unwrap().components[0].state, State::Ready);
    assert_eq!(
        said(&d, Reason::DisasterRecoveryWorkloadReady),
        [(
            false,
            "StatefulSet core-hub carries the disaster-recovery setup and passed its stability check"
                .to_string()
        )]
    );
    assert!(d.again);
    let (d, _) = decide_and_write(&mut g, &on_setup, 13, objects(users(), false));
    let published = services(&d);
    assert_eq!(published.len(), 1, "once every workload is ready");
    assert_eq!(
        published[0].metadata.name.as_deref(),
        Some("gluesync-disaster-recovery")
    );
    let (d, dr) = decide_and_write(&mut g, &on_setup, 14, objects(users(), true));
    let dr = dr.unwrap();
    assert_eq!(dr.phase, Phase::Active);
    assert_eq!(dr.service.as_deref(), Some("gluesync-disaster-recovery"));
    assert_eq!(
        said(&d, Reason::DisasterRecoveryActive),
        [(false, dr.message.clone())]
    );
    assert!(dr.message.contains("ports 1718 and 1719"), "{}", dr.message);
}

/// An active pair whose workload lost the setup outside GKO sets it again; a Service gone or whose
/// settings changed is written again, without touching the workloads; else nothing is done.
#[test]
fn an_active_pair_sets_again_what_changed_outside_gko() {
    let (mut g, mark) = wanting();
    let mut c = component(&before_setup());
    c.state = State::Ready;
    let mut status = with_setup(Phase::Active, &mark, c);
    let pair = status.disaster_recovery.as_mut().unwrap();
    pair.service = Some(service_name(&g));
    pair.service_settings = Some(service_digest(&spec()));
    g.status = Some(status.clone());
    let on_setup = [carrying(&mark, true)];
    let d = decide_seeing(&g, &on_setup, 0, objects(users(), true));
    assert!(changes_nothing(&d), "{:?}", d.actions);
    assert_eq!(d.status.disaster_recovery, status.disaster_recovery);

    let d = decide_seeing(&g, &on_setup, 0, objects(users(), false));
    assert_eq!(services(&d).len(), 1, "the Service gone is made again");
    assert_eq!(patched(&d), Vec::<&str>::new());

    let mut changed = spec();
    changed.service.annotations.insert("a".into(), "b".into());
    g.spec.disaster_recovery = Some(changed.clone());
    assert_eq!(setup_mark(&g, &changed), mark, "the pods do not change");
    let d = decide_seeing(&g, &on_setup, 0, objects(users(), true));
    assert_eq!(services(&d).len(), 1, "the new settings are written");
    assert_eq!(patched(&d), Vec::<&str>::new());
    let kept = d.status.disaster_recovery.unwrap();
    assert_eq!(kept.phase, Phase::Active);
    assert_eq!(
        kept.service_settings.as_deref(),
        Some(service_digest(&changed).as_str())
    );

    // Core Hub changed outside GKO (the setup's mark is gone): it is set again.
    g.spec.disaster_recovery = Some(spec());
    let d = decide_seeing(&g, &[before_setup()], 5, objects(users(), true));
    let dr = d.status.disaster_recovery.clone().unwrap();
    assert_eq!(dr.phase, Phase::SettingUp);
    assert_eq!(dr.since, at(5));
    assert_eq!(dr.components[0].state, State::Pending);
    assert_eq!(
        said(&d, Reason::DisasterRecoveryDrift),
        [(
            true,
            "core-hub no longer carry the disaster-recovery setup (changed outside GKO); setting it again"
                .to_string()
        )]
    );
    assert!(d.again);
}

/// A workload that does not come up with the setup within the stability timeout puts the whole setup
/// back (its pods of the setup that hang are deleted), then the Service and the Secret GKO wrote go,
/// and the setup ends Failed, where it stays while the spec asks for the same setup.
#[test]
fn a_workload_that_does_not_come_up_with_the_setup_puts_everything_back_then_fails() {
    let (mut g, mark) = wanting();
    let mut c = component(&before_setup());
    c.state = State::RollingOut;
    c.changed_at = Some(at(0));
    // A setup asked again over an active pair carries the pair's Service along.
    let mut status = with_setup(Phase::SettingUp, &mark, c);
    let pair = status.disaster_recovery.as_mut().unwrap();
    pair.service = Some(service_name(&g));
    pair.service_settings = Some(service_digest(&spec()));
    g.status = Some(status);
    let stuck = [carrying(&mark, false)];
    let none = DrObjects::default;
    let (_, dr) = decide_and_write(&mut g, &stuck, 59, none());
    assert_eq!(dr.unwrap().phase, Phase::SettingUp, "within the timeout");
    // The fault lands where it claims: the stability check of Core Hub on the setup.
    let (d, dr) = decide_and_write(&mut g, &stuck, 61, none());
    let dr = dr.unwrap();
    let why = dr.components[0].message.clone().unwrap_or_default();
    assert!(why.starts_with("not ready within 60 s"), "{why}");
    let failure = format!("StatefulSet core-hub did not come up with the setup: {why}");
    assert_eq!(dr.failure.as_deref(), Some(failure.as_str()));
    assert_eq!(dr.phase, Phase::RollingBack);
    assert_eq!(
        said(&d, Reason::DisasterRecoveryFailed),
        [(true, format!("{failure}; putting every change back"))]
    );
    // Put back: the change is written first, then made.
    let (d, dr) = decide_and_write(&mut g, &stuck, 62, none());
    let dr = dr.unwrap();
    assert_eq!(dr.components[0].state, State::Restoring);
    assert_eq!(dr.components[0].changed_at, Some(at(62)));
    assert_eq!(
        dr.message,
        format!("the disaster-recovery setup failed ({failure}); putting core-hub back")
    );
    assert!(changes_nothing(&d), "{:?}", d.actions);
    let (d, _) = decide_and_write(&mut g, &stuck, 63, none());
    let restore = patch_of(&d, "core-hub").expect("Core Hub is put back");
    assert!(restore["spec"]["template"]["metadata"]["annotations"][DR_ANNOTATION].is_null());
    // Back as before, its pod of the setup hanging: it is deleted (a StatefulSet waits for it).
    let (d, _) = decide_and_write(&mut g, &[put_back(false, Some(&mark))], 64, none());
    assert_eq!(deleted(&d), ["core-hub-0"]);
    // Up as before: after the stability window, the Service and the Secret GKO wrote go.
    let up = [put_back(true, None)];
    let made = || objects(SecretState::Present { made_by_gko: true }, true);
    let (d, _) = decide_and_write(&mut g, &up, 65, made());
    assert_eq!(removes(&d), Vec::<&Action>::new());
    let (d, dr) = decide_and_write(&mut g, &up, 75, made());
    let dr = dr.unwrap();
    assert_eq!(dr.components[0].state, State::Restored);
    assert_eq!(dr.phase, Phase::RollingBack, "until both are gone");
    assert_eq!(
        removes(&d),
        [
            &Action::RemoveMade(Made::Service, service_name(&g)),
            &Action::RemoveMade(Made::Secret, "s".into())
        ]
    );
    // The Service gone, the Secret emptied (no shared secret, no label): Failed.
    let emptied = || objects(SecretState::NoKey { made_by_gko: false }, false);
    let (d, dr) = decide_and_write(&mut g, &up, 76, emptied());
    assert_eq!(removes(&d), Vec::<&Action>::new());
    let dr = dr.unwrap();
    assert_eq!(dr.phase, Phase::Failed);
    assert!(dr.message.contains(&failure), "{}", dr.message);
    assert!(dr.components.is_empty());
    assert_eq!(
        (dr.service.as_deref(), dr.service_settings.as_deref()),
        (None, None)
    );
    assert_eq!(
        said(&d, Reason::DisasterRecoveryRolledBack),
        [(true, dr.message.clone())]
    );
    // Failed stays while the spec asks for the same setup.
    let d = decide_seeing(&g, &up, 500, emptied());
    assert_eq!(d.status.disaster_recovery, Some(dr));
    assert!(changes_nothing(&d), "{:?}", d.actions);
    assert!(says_nothing_of_the_pair(&d), "{:?}", d.events);
}

/// A pod of the setup that crash-loops fails the setup at once, long before the stability timeout;
/// one still from before the setup (being replaced) does not count against it.
#[test]
fn a_pod_of_the_setup_that_crash_loops_fails_it_at_once() {
    let (mut g, mark) = wanting();
    let mut c = component(&before_setup());
    c.state = State::RollingOut;
    c.changed_at = Some(at(0));
    g.status = Some(with_setup(Phase::SettingUp, &mark, c));
    let crashing = |on: Option<&str>| {
        let mut w = carrying(&mark, false);
        w.pods[0].dr_mark = on.map(Into::into);
        w.pods[0].waiting = Some(("CrashLoopBackOff".into(), "back-off 10s".into()));
        w
    };
    let d = decide_seeing(&g, &[crashing(None)], 5, DrObjects::default());
    let dr = d.status.disaster_recovery.clone().unwrap();
    assert_eq!(dr.phase, Phase::SettingUp);
    assert_eq!(dr.components[0].message, None);
    assert!(says_nothing_of_the_pair(&d), "{:?}", d.events);

    let d = decide_seeing(&g, &[crashing(Some(&mark))], 5, DrObjects::default());
    let dr = d.status.disaster_recovery.clone().unwrap();
    let why = "pod core-hub-0 is CrashLoopBackOff: back-off 10s";
    assert_eq!(dr.components[0].message.as_deref(), Some(why));
    assert_eq!(dr.phase, Phase::RollingBack);
    assert_eq!(
        said(&d, Reason::DisasterRecoveryFailed),
        [(
            true,
            format!(
                "StatefulSet core-hub did not come up with the setup: {why}; putting every change back"
            )
        )]
    );
}

/// A workload a setup changes that is gone fails the setup at once.
#[test]
fn a_workload_gone_fails_the_setup_at_once() {
    let (mut g, mark) = wanting();
    g.status = Some(with_setup(
        Phase::SettingUp,
        &mark,
        component(&before_setup()),
    ));
    let d = decide_seeing(&g, &[], 0, objects(users(), false));
    let dr = d.status.disaster_recovery.clone().unwrap();
    assert_eq!(
        (dr.phase, dr.failure.as_deref()),
        (Phase::RollingBack, Some("core-hub is gone"))
    );
    assert_eq!(
        said(&d, Reason::DisasterRecoveryFailed),
        [(
            true,
            "core-hub is gone; putting every change back".to_string()
        )]
    );
}

/// A teardown puts back Chronos, then Core Hub. Chronos is put back but does not pass its stability
/// check: that is said, it counts as back (nothing older to go back to), and the teardown goes on to
/// Core Hub; its new pod not ready yet and its old pod of the setup are not deleted. At the end the
/// Service goes and a Secret of the user's stays.
#[test]
fn a_workload_put_back_that_is_not_stable_is_said_and_the_teardown_goes_on() {
    let (mut g, mark) = wanting();
    g.spec.disaster_recovery = None;
    let mut core = component(&before_setup());
    core.state = State::Ready;
    let mut chronos = component(&as_chronos(before_setup()));
    chronos.state = State::Restoring;
    chronos.changed_at = Some(at(0));
    let mut status = with_setup(Phase::TearingDown, &mark, core);
    let pair = status.disaster_recovery.as_mut().unwrap();
    pair.components.push(chronos);
    g.status = Some(status);
    // Chronos as it was, a new pod not ready yet; an old pod of the setup still ready.
    let mut chronos_back = as_chronos(put_back(false, None));
    chronos_back.pods.push(PodView {
        name: "chronos-1".into(),
        uid: "chronos-1-uid".into(),
        ..as_chronos(carrying(&mark, true)).pods[0].clone()
    });
    let down = [carrying(&mark, true), chronos_back];
    let (d, dr) = decide_and_write(&mut g, &down, 59, objects(users(), true));
    let dr = dr.unwrap();
    let states: Vec<State> = dr.components.iter().map(|c| c.state).collect();
    assert_eq!(states, [State::Ready, State::Restoring]);
    assert_eq!(
        dr.message,
        "taking the disaster-recovery pair down: putting chronos back"
    );
    assert!(changes_nothing(&d), "{:?}", d.actions);
    // The fault lands where it claims: Chronos's stability check, at its timeout.
    let (d, dr) = decide_and_write(&mut g, &down, 61, objects(users(), true));
    let dr = dr.unwrap();
    let why = dr.components[1].message.clone().unwrap_or_default();
    assert!(why.starts_with("not ready within 60 s"), "{why}");
    assert_eq!(
        said(&d, Reason::DisasterRecoveryRestoreNotStable),
        [(
            true,
            format!(
                "StatefulSet chronos is back as it was before the setup but did not pass its stability check: {why}"
            )
        )]
    );
    let states: Vec<State> = dr.components.iter().map(|c| c.state).collect();
    assert_eq!(
        states,
        [State::Restoring, State::Restored],
        "Core Hub is next"
    );
    // Core Hub put back and up: the Service goes, the user's Secret stays.
    let back = [put_back(true, None), as_chronos(put_back(true, None))];
    decide_and_write(&mut g, &back, 62, objects(users(), true));
    let (d, dr) = decide_and_write(&mut g, &back, 72, objects(users(), true));
    assert_eq!(
        dr.unwrap().phase,
        Phase::TearingDown,
        "until the Service is gone"
    );
    assert_eq!(
        removes(&d),
        [&Action::RemoveMade(Made::Service, service_name(&g))]
    );
    let (d, dr) = decide_and_write(&mut g, &back, 73, objects(users(), false));
    assert_eq!(dr, None);
    assert_eq!(said(&d, Reason::DisasterRecoveryRemoved).len(), 1);
    assert_eq!(removes(&d), Vec::<&Action>::new());
}

/// A setup GKO cannot make is refused with why and changes nothing; an active pair asked for
/// settings it cannot take keeps running as it is; one asked for settings it can take sets up again
/// from the environment as it was before the first setup.
#[test]
fn a_setup_gko_cannot_make_is_refused_and_an_active_pair_keeps_running() {
    let (mut g, mark) = wanting();
    let secret = "Secret gluesync-disaster-recovery";
    let before = [before_setup()];
    let refusals = [
        (
            &before[..],
            SecretState::NotAllowed,
            format!("GKO's installation does not allow it to read {secret}"),
        ),
        (&before, SecretState::Missing, format!("{secret} does not exist")),
        (&before, SecretState::NoKey { made_by_gko: false }, format!("{secret} has no sharedSecret")),
        // As GKO reads a Secret it wrote whose key was taken out by hand (tests/cluster/disaster.rs).
        (&before, SecretState::NoKey { made_by_gko: true }, format!("{secret} has no sharedSecret")),
        (
            &before,
            SecretState::Unreadable("timeout".into()),
            format!("reading {secret}: timeout"),
        ),
        (&before, SecretState::Unknown, format!("{secret} was not read")),
        (
            &[before_setup(), before_setup()],
            users(),
            "a disaster-recovery setup needs exactly one Core Hub workload, and 2 are labelled core-hub"
                .into(),
        ),
        (
            &[Workload {
                container: None,
                ..before_setup()
            }],
            users(),
            "StatefulSet core-hub has no container named by its gluesync.molo17.com/container annotation"
                .into(),
        ),
    ];
    for (workloads, state, why) in refusals {
        g.status = None;
        let d = decide_seeing(&g, workloads, 0, objects(state, false));
        let dr = d.status.disaster_recovery.clone().unwrap();
        assert_eq!(dr.phase, Phase::Failed, "{why}");
        assert!(
            dr.message
                .starts_with("the disaster-recovery setup is refused: ")
                && dr.message.contains(&why),
            "{}",
            dr.message
        );
        assert!(changes_nothing(&d), "{:?}", d.actions);
        assert_eq!(
            said(&d, Reason::DisasterRecoveryRefused),
            [(true, dr.message.clone())]
        );
    }
    // A template with a setup made by hand is refused.
    g.status = None;
    let by_hand = core_hub(json!({"spec": {"containers": [{"name": "c",
        "ports": [{"name": "dr-control", "containerPort": 1719}]}]}}));
    let d = decide_seeing(&g, &[by_hand], 0, objects(users(), false));
    let dr = d.status.disaster_recovery.clone().unwrap();
    assert_eq!(dr.phase, Phase::Failed);
    assert!(
        dr.message.contains("container port 1719 (dr-control)"),
        "{}",
        dr.message
    );
    // Its workload was read whole before the refusal: nothing of it stays in the status.
    assert!(dr.components.is_empty());
    assert!(changes_nothing(&d), "{:?}", d.actions);

    // An active pair (Core Hub had GLUESYNC_DR_ROLE=standby before it) is asked for another peer.
    let before = core_hub(json!({"spec": {"containers": [{"name": "c",
        "env": [{"name": "GLUESYNC_DR_ROLE", "value": "standby"}]}]}}));
    let mut c = component(&before);
    c.state = State::Ready;
    let mut active = with_setup(Phase::Active, &mark, c.clone());
    active.disaster_recovery.as_mut().unwrap().service_settings = Some(service_digest(&spec()));
    let mut other = spec();
    other.peer_address = "elsewhere".into();
    g.spec.disaster_recovery = Some(other.clone());
    let on_setup = [carrying(&mark, true)];
    // Without the Secret the new settings are refused and the pair runs on as it is.
    g.status = Some(active.clone());
    let d = decide_seeing(&g, &on_setup, 0, objects(SecretState::Missing, true));
    let kept = d.status.disaster_recovery.clone().unwrap();
    assert_eq!(
        (kept.phase, kept.setup.as_str()),
        (Phase::Active, mark.as_str())
    );
    assert_eq!(kept.components, vec![c.clone()]);
    assert_eq!(
        kept.message,
        format!("the new disaster-recovery settings are refused: {secret} does not exist")
    );
    assert_eq!(
        said(&d, Reason::DisasterRecoveryRefused),
        [(true, kept.message.clone())]
    );
    assert!(changes_nothing(&d), "{:?}", d.actions);
    // With it, the new setup starts from what Core Hub carried before the first setup.
    let d = decide_seeing(&g, &on_setup, 0, objects(users(), true));
    let next = d.status.disaster_recovery.unwrap();
    assert_eq!(next.phase, Phase::SettingUp);
    assert_eq!(next.setup, setup_mark(&g, &other));
    assert_eq!(next.peer_address, "elsewhere");
    assert_eq!(next.service_settings, Some(service_digest(&spec())));
    assert_eq!(next.components[0].original, c.original);
    assert!(next.components[0].original.contains("standby"));
}

/// A setup asked from the Core Hub UI whose Secret GKO wrote, refused (a setup made by hand on Core
/// Hub), goes with that Secret once no longer wanted; asked again with other settings, it starts
/// again.
#[test]
fn a_refused_setup_goes_with_its_secret_or_starts_again_when_the_spec_changes() {
    let (mut g, _) = wanting();
    let written = || objects(SecretState::Present { made_by_gko: true }, false);
    let by_hand = [core_hub(json!({"spec": {"containers": [{"name": "c",
        "volumeMounts": [{"name": "keys", "mountPath": MOUNT_PATH}]}]}}))];
    let d = decide_seeing(&g, &by_hand, 0, written());
    let failed = d.status.disaster_recovery.clone().unwrap();
    assert_eq!(failed.phase, Phase::Failed);
    assert!(
        failed
            .message
            .contains("already has volume mount keys at /opt/gluesync/disaster-recovery"),
        "{}",
        failed.message
    );
    g.status = Some(d.status);
    // Asked again with other settings, the mount taken out: it starts.
    let mut other = spec();
    other.revision = Some("2".into());
    g.spec.disaster_recovery = Some(other);
    let d = decide_seeing(&g, &[before_setup()], 1, written());
    assert_eq!(d.status.disaster_recovery.unwrap().phase, Phase::SettingUp);
    // No longer wanted: the Secret GKO wrote is emptied, then the setup goes.
    g.spec.disaster_recovery = None;
    // Its key taken out by hand, it still carries GKO's mark: it is emptied all the same.
    for left in [
        written(),
        objects(SecretState::NoKey { made_by_gko: true }, false),
    ] {
        let d = decide_seeing(&g, &by_hand, 1, left);
        assert_eq!(d.status.disaster_recovery, Some(failed.clone()));
        assert_eq!(
            removes(&d),
            [&Action::RemoveMade(
                Made::Secret,
                failed.secret_name.clone()
            )]
        );
    }
    let d = decide_seeing(
        &g,
        &by_hand,
        2,
        objects(SecretState::NoKey { made_by_gko: false }, false),
    );
    assert_eq!(d.status.disaster_recovery, None);
}

#[test]
fn a_mount_or_volume_of_the_setups_names_is_a_setup_made_by_hand() {
    let by_name = core_hub(json!({"spec": {"containers": [{"name": "c",
        "volumeMounts": [{"name": VOLUME, "mountPath": "/x"}]}]}}));
    let why = collision(&by_name, "c", &spec()).unwrap();
    assert!(
        why.starts_with(
            "StatefulSet core-hub already has volume mount gluesync-disaster-recovery at /x"
        ),
        "{why}"
    );
    let at_path = core_hub(json!({"spec": {"containers": [{"name": "c",
        "volumeMounts": [{"name": "other", "mountPath": MOUNT_PATH}]}]}}));
    assert!(
        collision(&at_path, "c", &spec())
            .unwrap()
            .contains("volume mount other")
    );
    let volume = core_hub(json!({"spec": {"containers": [{"name": "c"}],
        "volumes": [{"name": VOLUME, "emptyDir": {}}]}}));
    assert!(
        collision(&volume, "c", &spec())
            .unwrap()
            .contains("already has volume gluesync-disaster-recovery,")
    );
    let elsewhere = core_hub(json!({"spec": {"containers": [{"name": "c",
        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        "volumes": [{"name": "data", "emptyDir": {}}]}}));
    assert_eq!(collision(&elsewhere, "c", &spec()), None);
}

/// A setup changes Core Hub, then Chronos, one at a time, each found by its name; a teardown puts
/// back the last changed first; a setup made by hand on Core Hub refuses the whole setup, though
/// Chronos carries nothing of one.
#[test]
fn a_setup_changes_one_workload_at_a_time_and_puts_back_the_last_changed_first() {
    let (mut g, mark) = wanting();
    let present = || objects(users(), false);
    let by_hand = core_hub(json!({"spec": {"containers": [{"name": "c"}],
        "volumes": [{"name": VOLUME, "emptyDir": {}}]}}));
    let d = decide_seeing(&g, &[by_hand, as_chronos(before_setup())], 0, present());
    let refused = d.status.disaster_recovery.unwrap();
    assert_eq!(refused.phase, Phase::Failed);
    assert!(
        refused
            .message
            .contains("StatefulSet core-hub already has volume"),
        "{}",
        refused.message
    );

    let states = |dr: Option<DisasterRecoveryStatus>| -> Vec<State> {
        dr.unwrap().components.iter().map(|c| c.state).collect()
    };
    let both = [before_setup(), as_chronos(before_setup())];
    let (_, dr) = decide_and_write(&mut g, &both, 0, present());
    let dr = dr.unwrap();
    assert!(
        dr.message.ends_with("changing core-hub, chronos"),
        "{}",
        dr.message
    );
    let (_, dr) = decide_and_write(&mut g, &both, 1, present());
    assert_eq!(states(dr), [State::RollingOut, State::Pending]);
    let (d, _) = decide_and_write(&mut g, &both, 2, present());
    assert_eq!(patched(&d), ["core-hub"]);
    let core_on = [carrying(&mark, true), as_chronos(before_setup())];
    decide_and_write(&mut g, &core_on, 3, present());
    let (_, dr) = decide_and_write(&mut g, &core_on, 12, present());
    assert_eq!(states(dr), [State::RollingOut, State::Pending]);
    // Core Hub passed its check: Chronos is next.
    let (_, dr) = decide_and_write(&mut g, &core_on, 13, present());
    assert_eq!(states(dr), [State::Ready, State::RollingOut]);
    let (d, _) = decide_and_write(&mut g, &core_on, 14, present());
    assert_eq!(patched(&d), ["chronos"]);

    // Taken down before Chronos passed its check: Chronos, changed last, is put back first.
    let both_on = [carrying(&mark, true), as_chronos(carrying(&mark, true))];
    g.spec.disaster_recovery = None;
    let (_, dr) = decide_and_write(&mut g, &both_on, 15, present());
    assert_eq!(dr.unwrap().phase, Phase::TearingDown);
    let (_, dr) = decide_and_write(&mut g, &both_on, 16, present());
    assert_eq!(states(dr), [State::Ready, State::Restoring]);
    let (d, _) = decide_and_write(&mut g, &both_on, 17, present());
    assert_eq!(patched(&d), ["chronos"]);
}

/// A workload that passed its check and then lost the setup (changed outside GKO) while the next one
/// rolls out gets the setup again, and passes its check again before the next one is looked at.
#[test]
fn a_workload_that_loses_the_setup_while_the_next_rolls_out_gets_it_again() {
    let (mut g, mark) = wanting();
    let present = || objects(users(), false);
    let both = [before_setup(), as_chronos(before_setup())];
    let core_on = [carrying(&mark, true), as_chronos(before_setup())];
    for (t, seen) in [(0, &both), (1, &both), (2, &both)]
        .into_iter()
        .chain([3, 12, 13, 14].map(|t| (t, &core_on)))
    {
        decide_and_write(&mut g, seen, t, present());
    }
    let states = |dr: &DisasterRecoveryStatus| -> Vec<State> {
        dr.components.iter().map(|c| c.state).collect()
    };
    let dr = g
        .status
        .as_ref()
        .unwrap()
        .disaster_recovery
        .clone()
        .unwrap();
    assert_eq!(states(&dr), [State::Ready, State::RollingOut]);

    // Core Hub's template put back by hand while Chronos rolls out with the setup.
    let lost = [before_setup(), as_chronos(carrying(&mark, false))];
    let (d, dr) = decide_and_write(&mut g, &lost, 15, present());
    let dr = dr.unwrap();
    assert_eq!(dr.phase, Phase::SettingUp);
    assert_eq!(states(&dr), [State::RollingOut, State::RollingOut]);
    assert_eq!(dr.components[0].changed_at, Some(at(15)));
    assert!(changes_nothing(&d), "{:?}", d.actions);
    let (d, _) = decide_and_write(&mut g, &lost, 16, present());
    assert_eq!(patched(&d), ["core-hub"]);
    // Core Hub passes its check again before Chronos is looked at: Chronos's window starts after.
    let back = [carrying(&mark, true), as_chronos(carrying(&mark, true))];
    let (_, dr) = decide_and_write(&mut g, &back, 17, present());
    let dr = dr.unwrap();
    assert_eq!(states(&dr), [State::RollingOut, State::RollingOut]);
    assert!(
        dr.components[0].stable.is_some() && dr.components[1].stable.is_none(),
        "{:?}",
        dr.components
    );
    let (_, dr) = decide_and_write(&mut g, &back, 27, present());
    let dr = dr.unwrap();
    assert_eq!(states(&dr), [State::Ready, State::RollingOut]);
    assert_eq!(
        dr.components[1].stable.as_ref().map(|w| &w.since),
        Some(&at(27))
    );
}

/// A workload is clean only when nothing of a setup is left on it: any one of the setup's marks
/// alone is a leftover; the install's own ports, mounts, volumes and environment are not.
#[test]
fn anything_a_setup_leaves_keeps_a_workload_from_being_clean() {
    let base = json!({"spec": {"containers": [{"name": "c",
        "env": [{"name": "A", "value": "1"}, {"name": "GLUESYNC_DR_ROLE", "value": "standby"}],
        "ports": [{"name": "http", "containerPort": 8080}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        "volumes": [{"name": "data", "emptyDir": {}}]}});
    let c = component(&core_hub(base.clone()));
    assert!(c.original.contains("standby"), "{}", c.original);
    assert!(clean(&core_hub(base.clone()), &c));
    /// What a setup may leave behind: its name, and how it is left in a template.
    type Leftover = (&'static str, fn(&mut Value));
    let leftovers: [Leftover; 7] = [
        ("the mark", |t| {
            t["metadata"] = json!({"annotations": {DR_ANNOTATION: "primary-x"}})
        }),
        ("the replication port", |t| {
            t["spec"]["containers"][0]["ports"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "dr-replication", "containerPort": 1718}))
        }),
        ("the control port", |t| {
            t["spec"]["containers"][0]["ports"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "dr-control", "containerPort": 9999}))
        }),
        ("the mount", |t| {
            t["spec"]["containers"][0]["volumeMounts"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": VOLUME, "mountPath": MOUNT_PATH}))
        }),
        ("the volume", |t| {
            t["spec"]["volumes"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": VOLUME, "secret": {"secretName": "s"}}))
        }),
        ("a variable the setup changed", |t| {
            t["spec"]["containers"][0]["env"][1]["value"] = json!("primary")
        }),
        ("a variable the setup added", |t| {
            t["spec"]["containers"][0]["env"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "GLUESYNC_DR_ENABLED", "value": "true"}))
        }),
    ];
    for (what, leave) in leftovers {
        let mut t = base.clone();
        leave(&mut t);
        assert!(!clean(&core_hub(t), &c), "{what} is left");
    }
}

/// A setup asked again with another port takes the old port out and leaves the install's own;
/// putting back takes out only what the setup made, and names only the variables it changed; a
/// patch carries no empty list (it would replace the workload's).
#[test]
fn a_patch_touches_only_what_a_setup_makes() {
    let g = gsp();
    let before = core_hub(json!({"spec": {"containers": [{"name": "c",
        "ports": [{"name": "http", "containerPort": 8080}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
        "volumes": [{"name": "data", "emptyDir": {}}]}}));
    let c = component(&before);
    let set = core_hub(json!({
        "metadata": {"annotations": {DR_ANNOTATION: "primary-x"}},
        "spec": {"containers": [{"name": "c",
            "env": [{"name": "GLUESYNC_DR_ENABLED", "value": "true"}],
            "ports": [{"name": "http", "containerPort": 8080},
                      {"name": "dr-replication", "containerPort": 1718},
                      {"name": "dr-control", "containerPort": 1719}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"},
                             {"name": VOLUME, "mountPath": MOUNT_PATH}]}],
            "volumes": [{"name": "data", "emptyDir": {}},
                        {"name": VOLUME, "secret": {"secretName": "s"}}]}}));
    let mut moved = spec();
    moved.replication_port = 2718;
    let again = patch(&g, &set, &c, Some((&moved, "primary-y")));
    let ports = again["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .unwrap();
    let deleted: Vec<&Value> = ports
        .iter()
        .filter(|p| p["$patch"] == "delete")
        .map(|p| &p["containerPort"])
        .collect();
    assert_eq!(deleted, [&json!(1718)], "{ports:?}");
    let given: Vec<(&Value, &Value)> = ports
        .iter()
        .filter(|p| p.get("$patch").is_none())
        .map(|p| (&p["name"], &p["containerPort"]))
        .collect();
    assert_eq!(
        given,
        [
            (&json!("dr-replication"), &json!(2718)),
            (&json!("dr-control"), &json!(1719))
        ]
    );

    let back = patch(&g, &set, &c, None);
    assert_eq!(
        back["spec"]["template"]["spec"],
        json!({
            "containers": [{"name": "c",
                "env": [{"name": "GLUESYNC_DR_ENABLED", "$patch": "delete"}],
                "ports": [{"containerPort": 1718, "$patch": "delete"},
                          {"containerPort": 1719, "$patch": "delete"}],
                "volumeMounts": [{"mountPath": MOUNT_PATH, "$patch": "delete"}]}],
            "volumes": [{"name": VOLUME, "$patch": "delete"}]})
    );
    let only_env = patch(&g, &left_by_setup(), &component(&before_setup()), None);
    assert_eq!(
        only_env["spec"]["template"]["spec"],
        json!({"containers": [{"name": "c",
            "env": [{"name": "GLUESYNC_DR_ENABLED", "$patch": "delete"}]}]})
    );
}
