//! Cluster tests of disaster recovery: two namespaces as the two sites of a pair, the simulator as each
//! Core Hub, GKO building each site from the Conductor API (or the spec) and taking it down again.

use crate::common;

use std::time::Duration;

use common::*;
use gko_test_support::{TestNamespace, eventually};
use gluesync_operator::api::{
    DisasterRecoveryComponentState, DisasterRecoveryPhase, DisasterRecoveryStatus,
};
use k8s_openapi::api::core::v1::{Secret, Service};
use serde_json::{Value, json};

const CORE_HUB: &str = "gluesync-gluesync-core-hub";
const CHRONOS: &str = "gluesync-gluesync-chronos";
const SECRET: &str = "gluesync-disaster-recovery";
/// The pair's shared secret: it must show up nowhere but in the Secret.
const SHARED: &str = "pair-secret-0123456789-abcdefghij-KLMNOP";

struct Ui {
    http: reqwest::Client,
    base: String,
}

impl Ui {
    fn at(base: String) -> Ui {
        Ui {
            http: reqwest::Client::new(),
            base,
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        token: Option<&str>,
        body: Option<Value>,
    ) -> anyhow::Result<(u16, String)> {
        let mut req = self
            .http
            .request(
                method,
                format!("{}/conductor/api/disaster-recovery", self.base),
            )
            .header("content-type", "application/json");
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.body(b.to_string());
        }
        let resp = req.send().await?;
        Ok((resp.status().as_u16(), resp.text().await?))
    }

    /// A request the API must accept (202); its answer.
    async fn accepted(
        &self,
        method: reqwest::Method,
        token: &str,
        body: Option<Value>,
    ) -> anyhow::Result<String> {
        let (code, answer) = self.call(method, Some(token), body).await?;
        assert_eq!(code, 202, "{answer}");
        Ok(answer)
    }
}

/// GKO as a process (its log is read), serving the Conductor API.
fn gko_serving(ns: &TestNamespace) -> anyhow::Result<(Gko, Ui)> {
    let addr = gko_test_support::free_addr()?.to_string();
    let gko = Gko::spawn(
        ns,
        GkoOptions {
            conductor_addr: Some(addr.clone()),
            ..Default::default()
        },
    )?;
    Ok((gko, Ui::at(format!("http://{addr}"))))
}

/// A site: the sample install and the simulator as its Core Hub.
async fn site(hint: &str) -> anyhow::Result<(TestNamespace, gluesync_simulator::Simulator)> {
    let ns = namespace(hint).await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    Ok((ns, sim))
}

/// A workload's pod template exactly as the API server stores it.
fn template(ns: &TestNamespace, name: &str) -> anyhow::Result<String> {
    ns.kubectl(&[
        "get",
        "statefulset",
        name,
        "-o",
        "jsonpath={.spec.template}",
    ])
}

fn dr(g: &gluesync_operator::api::GluesyncPlatform) -> Option<&DisasterRecoveryStatus> {
    g.status.as_ref().and_then(|s| s.disaster_recovery.as_ref())
}

async fn wait_dr_phase(
    ns: &TestNamespace,
    phase: DisasterRecoveryPhase,
) -> anyhow::Result<gluesync_operator::api::GluesyncPlatform> {
    wait_for_platform(ns, &format!("disaster recovery {phase:?}"), |g| {
        dr(g).is_some_and(|d| d.phase == phase)
    })
    .await
}

async fn wait_dr_gone(
    ns: &TestNamespace,
) -> anyhow::Result<gluesync_operator::api::GluesyncPlatform> {
    wait_for_platform(ns, "no disaster-recovery setup", |g| {
        dr(g).is_none() && g.spec.disaster_recovery.is_none()
    })
    .await
}

async fn secret(ns: &TestNamespace) -> anyhow::Result<Option<Secret>> {
    Ok(kube::Api::<Secret>::namespaced(ns.client.clone(), &ns.name)
        .get_opt(SECRET)
        .await?)
}

/// The pair's Secret, which the install creates empty (GKO may not create Secrets), holds no shared
/// secret and no mark of a setup.
async fn assert_secret_empty(ns: &TestNamespace) -> anyhow::Result<()> {
    let s = secret(ns).await?.expect("the install's Secret stays");
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    assert!(
        s.data.unwrap_or_default().is_empty(),
        "the Secret holds nothing"
    );
    assert!(
        !s.metadata
            .labels
            .unwrap_or_default()
            .contains_key("gluesync.molo17.com/platform"),
        "no setup's mark"
    );
    Ok(())
}

/// The Service's spec without the addresses the cluster gives it.
async fn service_shape(
    ns: &TestNamespace,
) -> anyhow::Result<Option<k8s_openapi::api::core::v1::ServiceSpec>> {
    Ok(service(ns).await?.and_then(|s| s.spec).map(|mut s| {
        s.cluster_ip = None;
        s.cluster_ips = None;
        s
    }))
}

async fn service(ns: &TestNamespace) -> anyhow::Result<Option<Service>> {
    Ok(
        kube::Api::<Service>::namespaced(ns.client.clone(), &ns.name)
            .get_opt("gluesync-disaster-recovery")
            .await?,
    )
}

/// Every event message on the namespace's objects, with its reason.
async fn events(ns: &TestNamespace) -> anyhow::Result<Vec<(String, String)>> {
    use k8s_openapi::api::events::v1::Event;
    let list = kube::Api::<Event>::namespaced(ns.client.clone(), &ns.name)
        .list(&Default::default())
        .await?;
    let mut out: Vec<_> = list
        .items
        .into_iter()
        .map(|e| {
            (
                e.metadata.creation_timestamp.map(|t| t.0),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect();
    out.sort_by_key(|e| e.0);
    Ok(out.into_iter().map(|(_, r, n)| (r, n)).collect())
}

/// Waits until events with each of `reasons` are recorded (they follow the status write); the reasons of
/// every event then.
async fn wait_events(ns: &TestNamespace, reasons: &[&str]) -> anyhow::Result<Vec<String>> {
    eventually(
        &format!("events {reasons:?}"),
        Duration::from_secs(20),
        || async {
            let all: Vec<String> = events(ns).await?.into_iter().map(|(r, _)| r).collect();
            Ok(reasons
                .iter()
                .all(|r| all.iter().any(|x| x == r))
                .then_some(all))
        },
    )
    .await
}

/// The workload carries the setup: the environment, the two ports, the Secret mounted.
fn assert_carries(template: &str, role: &str, peer: &str) -> anyhow::Result<()> {
    let t: Value = serde_json::from_str(template)?;
    let c = &t["spec"]["containers"][0];
    let env: Vec<(String, String)> = c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_string(),
                e["value"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let want = [
        ("GLUESYNC_DR_ENABLED", "true"),
        ("GLUESYNC_DR_ROLE", role),
        ("GLUESYNC_DR_PEER_ADDRESS", peer),
        ("GLUESYNC_DR_REPLICATION_PORT", "1718"),
        ("GLUESYNC_DR_CONTROL_PORT", "1719"),
        (
            "GLUESYNC_DR_SECRET_FILE",
            "/opt/gluesync/disaster-recovery/sharedSecret",
        ),
    ];
    for (k, v) in want {
        assert!(
            env.iter().any(|(n, x)| n == k && x == v),
            "{k}={v} missing in {env:?}"
        );
    }
    let ports: Vec<(String, i64)> = c["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_string(),
                p["containerPort"].as_i64().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        ports.contains(&("dr-replication".into(), 1718)),
        "{ports:?}"
    );
    assert!(ports.contains(&("dr-control".into(), 1719)), "{ports:?}");
    assert!(
        c["volumeMounts"].as_array().into_iter().flatten().any(|m| {
            m["name"] == SECRET
                && m["mountPath"] == "/opt/gluesync/disaster-recovery"
                && m["readOnly"] == true
        }),
        "{c}"
    );
    assert!(
        t["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v["name"] == SECRET && v["secret"]["secretName"] == SECRET),
        "{t}"
    );
    Ok(())
}

fn setup_body(role: &str, peer: &str) -> Value {
    json!({"role": role, "peerAddress": peer, "sharedSecret": SHARED})
}

/// What a site looks like once its setup is in place: Secret, workloads, Service, status, events.
async fn assert_site_built(
    ns: &TestNamespace,
    role: &str,
    peer: &str,
    service_type: &str,
) -> anyhow::Result<()> {
    let g = wait_dr_phase(ns, DisasterRecoveryPhase::Active).await?;
    let d = dr(&g).unwrap();
    assert_eq!(d.role.as_str(), role);
    assert_eq!(d.peer_address, peer);
    assert_eq!(d.service.as_deref(), Some("gluesync-disaster-recovery"));
    let names: Vec<(&str, DisasterRecoveryComponentState)> = d
        .components
        .iter()
        .map(|c| (c.name.as_str(), c.state))
        .collect();
    assert_eq!(
        names,
        [
            (CORE_HUB, DisasterRecoveryComponentState::Ready),
            (CHRONOS, DisasterRecoveryComponentState::Ready)
        ]
    );
    let s = secret(ns).await?.expect("the Secret GKO wrote");
    assert_eq!(
        s.data.unwrap()["sharedSecret"].0,
        SHARED.as_bytes(),
        "the Secret holds the shared secret"
    );
    assert_eq!(
        s.metadata.labels.unwrap_or_default()["gluesync.molo17.com/platform"],
        "gluesync",
        "marked as the setup's"
    );
    assert!(
        s.metadata.owner_references.is_none(),
        "the install's Secret, not the platform's: it outlives a deletion of the platform"
    );
    for w in [CORE_HUB, CHRONOS] {
        assert_carries(&template(ns, w)?, role, peer)?;
        // Each passed the stability check: every pod runs the setup and is ready.
        let pods = ns.kubectl(&[
            "get",
            "pods",
            "-l",
            &format!("app.kubernetes.io/name={w}"),
            "-o",
            "jsonpath={range .items[*]}{.metadata.annotations.gluesync\\.molo17\\.com/disaster-recovery} {.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
        ])?;
        assert!(
            pods.lines().all(|l| l == format!("{} True", d.setup)),
            "{w}'s pods: {pods:?}"
        );
    }
    let svc = service(ns).await?.expect("the Service");
    let spec = svc.spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some(service_type));
    let ports: Vec<(String, i32)> = spec
        .ports
        .unwrap()
        .into_iter()
        .map(|p| (p.name.unwrap_or_default(), p.port))
        .collect();
    assert_eq!(
        ports,
        [("dr-replication".into(), 1718), ("dr-control".into(), 1719)]
    );
    assert_eq!(
        spec.selector
            .unwrap()
            .get("app.kubernetes.io/name")
            .map(String::as_str),
        Some(CORE_HUB),
        "the Service selects Core Hub's pods"
    );
    let reasons = wait_events(
        ns,
        &[
            "DisasterRecoveryStarted",
            "DisasterRecoveryWorkloadReady",
            "DisasterRecoveryActive",
        ],
    )
    .await?;
    assert_eq!(
        reasons
            .iter()
            .filter(|r| *r == "DisasterRecoveryWorkloadReady")
            .count(),
        2
    );
    Ok(())
}

/// The shared secret is in no event and no status.
async fn assert_secret_nowhere(ns: &TestNamespace) -> anyhow::Result<()> {
    for (reason, note) in events(ns).await? {
        assert!(!note.contains(SHARED), "event {reason} names the secret");
    }
    let g = platforms(ns).get("gluesync").await?;
    assert!(!serde_json::to_string(&g)?.contains(SHARED));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pair_is_set_up_from_the_ui_and_taken_down_as_it_was() -> anyhow::Result<()> {
    let (a, sim_a) = site("dr-primary").await?;
    let (b, sim_b) = site("dr-secondary").await?;
    // Site A: GKO as a process (its log is read); site B: GKO with only its Role's rights.
    let (gko_a, ui_a) = gko_serving(&a)?;
    let (_gko_b, base_b) = Operator::start_serving_with_role(&b).await?;
    let ui_b = Ui::at(base_b);
    wait_settled(&a).await?;
    wait_settled(&b).await?;
    let before_a = [template(&a, CORE_HUB)?, template(&a, CHRONOS)?];
    let before_b = [template(&b, CORE_HUB)?, template(&b, CHRONOS)?];

    let admin_a = sim_a.token_for("admin");
    let admin_b = sim_b.token_for("admin");
    let body = ui_a
        .accepted(
            reqwest::Method::PUT,
            &admin_a,
            Some(setup_body("primary", "dr-b.example.com")),
        )
        .await?;
    assert!(
        !body.contains(SHARED),
        "the answer echoes no secret: {body}"
    );
    let mut secondary = setup_body("secondary", "dr-a.example.com");
    secondary["service"] =
        json!({"type": "NodePort", "annotations": {"example.com/lb": "internal"}});
    ui_b.accepted(reqwest::Method::PUT, &admin_b, Some(secondary))
        .await?;

    assert_site_built(&a, "primary", "dr-b.example.com", "LoadBalancer").await?;
    assert_site_built(&b, "secondary", "dr-a.example.com", "NodePort").await?;
    let annotations = service(&b).await?.unwrap().metadata.annotations.unwrap();
    assert_eq!(annotations["example.com/lb"], "internal");

    // Saved again with other Service settings and the same secret: the Service changes, the workloads
    // do not roll.
    let built_b = [template(&b, CORE_HUB)?, template(&b, CHRONOS)?];
    let mut again = setup_body("secondary", "dr-a.example.com");
    again["service"] = json!({"type": "NodePort", "annotations": {"example.com/lb": "public"}});
    ui_b.accepted(reqwest::Method::PUT, &admin_b, Some(again))
        .await?;
    eventually(
        "the new Service settings",
        Duration::from_secs(20),
        || async {
            let svc = service(&b).await?;
            let a = svc.and_then(|s| s.metadata.annotations).unwrap_or_default();
            Ok((a.get("example.com/lb").map(String::as_str) == Some("public")).then_some(()))
        },
    )
    .await?;
    let g = wait_dr_phase(&b, DisasterRecoveryPhase::Active).await?;
    assert_eq!(
        [template(&b, CORE_HUB)?, template(&b, CHRONOS)?],
        built_b,
        "the workloads did not roll: {:?}",
        dr(&g)
    );

    let (code, body) = ui_a
        .call(reqwest::Method::GET, Some(&admin_a), None)
        .await?;
    assert_eq!(code, 200, "{body}");
    let state: Value = serde_json::from_str(&body)?;
    assert_eq!(state["data"]["state"]["phase"], "Active");
    assert_eq!(state["data"]["wanted"]["role"], "primary");
    assert!(!body.contains(SHARED));

    assert_secret_nowhere(&a).await?;
    assert_secret_nowhere(&b).await?;

    // Teardown: the workloads as they were, byte for byte; the Service gone and the Secret emptied.
    for (ui, token) in [(&ui_a, &admin_a), (&ui_b, &admin_b)] {
        ui.accepted(reqwest::Method::DELETE, token, None).await?;
    }
    for (ns, before) in [(&a, &before_a), (&b, &before_b)] {
        wait_dr_gone(ns).await?;
        assert_eq!(
            [template(ns, CORE_HUB)?, template(ns, CHRONOS)?],
            *before,
            "the pod templates are as before the setup"
        );
        assert_secret_empty(ns).await?;
        assert!(service(ns).await?.is_none(), "the Service is removed");
        wait_events(
            ns,
            &["DisasterRecoveryTeardownStarted", "DisasterRecoveryRemoved"],
        )
        .await?;
        assert_secret_nowhere(ns).await?;
    }
    assert!(gko_a.said("disaster-recovery setup requested"));
    assert!(
        !gko_a.said(SHARED),
        "GKO's log never carries the shared secret"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_that_crashes_core_hub_is_rolled_back_with_nothing_left() -> anyhow::Result<()> {
    let (ns, sim) = site("dr-crash").await?;
    let (_gko, base) = Operator::start_serving_with_role(&ns).await?;
    let ui = Ui::at(base);
    wait_settled(&ns).await?;
    let before = [template(&ns, CORE_HUB)?, template(&ns, CHRONOS)?];
    let admin = sim.token_for("admin");
    // The simulated node crash-loops a container whose peer address ends in ".crash".
    ui.accepted(
        reqwest::Method::PUT,
        &admin,
        Some(setup_body("primary", "peer.crash")),
    )
    .await?;
    let g = wait_dr_phase(&ns, DisasterRecoveryPhase::Failed).await?;

    // The fault landed where it claims: Core Hub's pods on the setup crash-looped.
    let evs = eventually("the rollback's events", Duration::from_secs(20), || async {
        let evs = events(&ns).await?;
        Ok(evs
            .iter()
            .any(|(r, _)| r == "DisasterRecoveryRolledBack")
            .then_some(evs))
    })
    .await?;
    let failed = evs
        .iter()
        .find(|(r, _)| r == "DisasterRecoveryFailed")
        .map(|(_, n)| n.clone())
        .expect("a DisasterRecoveryFailed event");
    assert!(failed.contains(CORE_HUB), "{failed}");
    assert!(failed.contains("CrashLoopBackOff"), "{failed}");
    assert!(
        evs.iter().any(|(r, _)| r == "DisasterRecoveryRolledBack"),
        "{evs:?}"
    );
    assert!(
        !evs.iter()
            .any(|(r, _)| r == "DisasterRecoveryWorkloadReady"),
        "no workload passed: {evs:?}"
    );
    let d = dr(&g).unwrap();
    assert!(d.message.contains("rolled back"), "{}", d.message);
    assert!(d.components.is_empty());

    // Nothing half-made is left.
    assert_eq!(
        [template(&ns, CORE_HUB)?, template(&ns, CHRONOS)?],
        before,
        "both pod templates are as before"
    );
    assert_secret_empty(&ns).await?;
    assert!(service(&ns).await?.is_none(), "no Service");
    wait_settled(&ns).await?;
    // Failed stays until the setup asked for changes; taking it away clears it.
    ui.accepted(reqwest::Method::DELETE, &admin, None).await?;
    wait_dr_gone(&ns).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_super_admin_may_and_bad_input_changes_nothing() -> anyhow::Result<()> {
    let (ns, sim) = site("dr-refused").await?;
    let (gko, ui) = gko_serving(&ns)?;
    wait_settled(&ns).await?;
    let before = [template(&ns, CORE_HUB)?, template(&ns, CHRONOS)?];
    let good = setup_body("primary", "dr-b.example.com");

    // Not a Super Admin: refused, whatever the method.
    for user in ["manager", "monitor", "viewer"] {
        let token = sim.token_for(user);
        for (method, body) in [
            (reqwest::Method::GET, None),
            (reqwest::Method::PUT, Some(good.clone())),
            (reqwest::Method::DELETE, None),
        ] {
            let (code, text) = ui.call(method.clone(), Some(&token), body).await?;
            assert_eq!(code, 403, "{user} {method}: {text}");
        }
    }
    let (code, _) = ui
        .call(reqwest::Method::PUT, None, Some(good.clone()))
        .await?;
    assert_eq!(code, 401);
    let (code, _) = ui
        .call(reqwest::Method::PUT, Some("made-up"), Some(good.clone()))
        .await?;
    assert_eq!(code, 401);

    // Malformed: 400, with a reason that does not quote the secret.
    let admin = sim.token_for("admin");
    let with = |k: &str, v: Value| {
        let mut b = good.clone();
        b[k] = v;
        b
    };
    let bad = [
        with("role", json!("tertiary")),
        with("peerAddress", json!("")),
        with("peerAddress", json!("peer with spaces")),
        with("peerAddress", json!("http://peer/x")),
        with("sharedSecret", json!("short")),
        with("sharedSecret", json!(format!("{SHARED} with space"))),
        with("sharedSecret", json!(7)),
        with("replicationPort", json!(70000)),
        with("controlPort", json!(1718)),
        with("unknown", json!(true)),
        with("service", json!({"type": "Ingress"})),
        json!({"role": "primary", "sharedSecret": SHARED}),
        json!([1, 2]),
    ];
    for body in bad {
        let (code, text) = ui
            .call(reqwest::Method::PUT, Some(&admin), Some(body.clone()))
            .await?;
        assert_eq!(code, 400, "{body}: {text}");
        assert!(!text.contains(SHARED), "{text}");
        assert!(text.contains("\"success\":false"), "{text}");
    }
    // A body the size limit refuses.
    let (code, _) = ui
        .call(
            reqwest::Method::PUT,
            Some(&admin),
            Some(with("sharedSecret", json!("x".repeat(100_000)))),
        )
        .await?;
    assert_eq!(code, 413);
    // A Super Admin's session cookie on a cross-site request: refused, as every write.
    for (origin, content_type) in [
        (Some("https://evil.example.com"), "application/json"),
        (None, "text/plain"),
    ] {
        let mut req = ui
            .http
            .put(format!("{}/conductor/api/disaster-recovery", ui.base))
            .header("cookie", format!("gs-auth={admin}"))
            .header("content-type", content_type)
            .body(good.to_string());
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        assert_eq!(
            req.send().await?.status().as_u16(),
            403,
            "{origin:?} {content_type}"
        );
    }
    // The route and its body are described.
    let doc: Value = ui
        .http
        .get(format!("{}/openapi.json", ui.base))
        .send()
        .await?
        .json()
        .await?;
    assert!(doc["paths"]["/disaster-recovery"]["put"].is_object());
    assert_eq!(
        doc["components"]["schemas"]["DisasterRecoverySetup"]["properties"]["sharedSecret"]["writeOnly"],
        true
    );
    // Nothing to take down.
    let (code, _) = ui.call(reqwest::Method::DELETE, Some(&admin), None).await?;
    assert_eq!(code, 404);

    // Nothing was changed.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let g = platforms(&ns).get("gluesync").await?;
    assert!(g.spec.disaster_recovery.is_none());
    assert!(dr(&g).is_none());
    assert_secret_empty(&ns).await?;
    assert!(service(&ns).await?.is_none());
    assert_eq!([template(&ns, CORE_HUB)?, template(&ns, CHRONOS)?], before);

    // Under gitops the UI does not set disaster recovery up: it lives in Git.
    patch_spec(&ns, json!({"updatePolicy": "gitops"})).await?;
    wait_for_platform(&ns, "GKO to see the gitops policy", |g| {
        g.status.as_ref().and_then(|s| s.observed_generation) == g.metadata.generation
    })
    .await?;
    let (code, text) = ui
        .call(reqwest::Method::PUT, Some(&admin), Some(good.clone()))
        .await?;
    assert_eq!(code, 409, "{text}");
    assert!(text.contains("managed in Git"), "{text}");
    assert_secret_empty(&ns).await?;
    assert!(
        !gko.said(SHARED),
        "GKO's log never carries the shared secret"
    );
    Ok(())
}

/// The setup kept in the spec (as from Git), with a Secret of the user's.
fn spec_setup() -> Value {
    json!({"disasterRecovery": {
        "role": "secondary",
        "peerAddress": "dr-a.example.com",
        "revision": "r1",
        "service": {"type": "ClusterIP"},
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gko_killed_at_each_step_of_a_setup_and_a_teardown_ends_as_without_the_kill()
-> anyhow::Result<()> {
    let (ns, _sim) = site("dr-kill").await?;
    ns.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {SECRET}\nstringData:\n  sharedSecret: {SHARED}\n"
    ))?;
    let before = [template(&ns, CORE_HUB)?, template(&ns, CHRONOS)?];
    let clean = || {
        Gko::spawn(
            &ns,
            GkoOptions {
                ..Default::default()
            },
        )
    };
    let paused = |point: &str| {
        Gko::spawn(
            &ns,
            GkoOptions {
                env: vec![("GKO_PAUSE_AFTER_STATUS_WRITE".into(), point.into())],
                ..Default::default()
            },
        )
    };
    let set_up = || async { patch_spec(&ns, spec_setup()).await };
    let take_down = || async { patch_spec(&ns, json!({"disasterRecovery": null})).await };

    // Without a kill: the reference state.
    let mut gko = clean()?;
    wait_settled(&ns).await?;
    set_up().await?;
    wait_dr_phase(&ns, DisasterRecoveryPhase::Active).await?;
    let built = [template(&ns, CORE_HUB)?, template(&ns, CHRONOS)?];
    assert_carries(&built[0], "secondary", "dr-a.example.com")?;
    let built_service = service_shape(&ns).await?.expect("the Service");
    take_down().await?;
    wait_dr_gone(&ns).await?;
    assert_eq!([template(&ns, CORE_HUB)?, template(&ns, CHRONOS)?], before);
    gko.terminate()?;

    let position = |g: &gluesync_operator::api::GluesyncPlatform| -> String {
        let Some(d) = dr(g) else {
            return String::new();
        };
        let moving = d.components.iter().enumerate().find(|(_, c)| {
            matches!(
                c.state,
                DisasterRecoveryComponentState::RollingOut
                    | DisasterRecoveryComponentState::Restoring
            )
        });
        match moving {
            Some((i, c)) => format!("DR:{}:{i}:{:?}", d.phase.as_str(), c.state),
            None if d.phase == DisasterRecoveryPhase::SettingUp
                && !d.components.is_empty()
                && d.components
                    .iter()
                    .all(|c| c.state == DisasterRecoveryComponentState::Ready) =>
            {
                format!("DR:{}:Service", d.phase.as_str())
            }
            None if d.phase == DisasterRecoveryPhase::TearingDown
                && d.components
                    .iter()
                    .all(|c| c.state == DisasterRecoveryComponentState::Restored) =>
            {
                format!("DR:{}:Cleanup", d.phase.as_str())
            }
            None => format!("DR:{}", d.phase.as_str()),
        }
    };

    // Killed at each step of a setup.
    for point in [
        "DR:SettingUp",
        "DR:SettingUp:0:RollingOut",
        "DR:SettingUp:1:RollingOut",
        "DR:SettingUp:Service",
        "DR:Active",
    ] {
        let mut gko = paused(point)?;
        set_up().await?;
        gko.wait_for_line("fault point hit", Duration::from_secs(60))
            .await?;
        let g = platforms(&ns).get("gluesync").await?;
        assert_eq!(position(&g), point, "the kill lands at {point}");
        gko.kill()?;
        let mut gko = clean()?;
        wait_dr_phase(&ns, DisasterRecoveryPhase::Active).await?;
        assert_eq!(
            [template(&ns, CORE_HUB)?, template(&ns, CHRONOS)?],
            built,
            "killed at {point}: the workloads as without the kill"
        );
        assert_eq!(
            service_shape(&ns).await?.expect("the Service"),
            built_service,
            "killed at {point}"
        );
        take_down().await?;
        wait_dr_gone(&ns).await?;
        assert_eq!(
            [template(&ns, CORE_HUB)?, template(&ns, CHRONOS)?],
            before,
            "after the teardown following a kill at {point}"
        );
        gko.terminate()?;
    }

    // Killed at each step of a teardown.
    for point in [
        "DR:TearingDown",
        "DR:TearingDown:1:Restoring",
        "DR:TearingDown:0:Restoring",
        "DR:TearingDown:Cleanup",
    ] {
        let mut gko = clean()?;
        set_up().await?;
        wait_dr_phase(&ns, DisasterRecoveryPhase::Active).await?;
        gko.terminate()?;
        let mut gko = paused(point)?;
        take_down().await?;
        gko.wait_for_line("fault point hit", Duration::from_secs(60))
            .await?;
        let g = platforms(&ns).get("gluesync").await?;
        assert_eq!(position(&g), point, "the kill lands at {point}");
        gko.kill()?;
        let mut gko = clean()?;
        wait_dr_gone(&ns).await?;
        assert_eq!(
            [template(&ns, CORE_HUB)?, template(&ns, CHRONOS)?],
            before,
            "killed at {point}: the workloads as before the setup"
        );
        assert!(service(&ns).await?.is_none(), "killed at {point}");
        assert!(
            secret(&ns).await?.is_some(),
            "the user's own Secret stays (GKO did not write it)"
        );
        gko.terminate()?;
    }
    Ok(())
}

/// Samples the platform every 50 ms until `done`, and fails if an update and a disaster-recovery change
/// ever ran at once; what was seen, in order (without repeats).
async fn never_together(
    ns: &TestNamespace,
    done: impl Fn(&gluesync_operator::api::GluesyncPlatform) -> bool,
) -> anyhow::Result<Vec<String>> {
    let api = platforms(ns);
    let mut seen: Vec<String> = vec![];
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let g = api.get("gluesync").await?;
        let updating = g.status.as_ref().and_then(|s| s.update.as_ref()).is_some();
        let changing = dr(&g).is_some_and(|d| {
            matches!(
                d.phase,
                DisasterRecoveryPhase::SettingUp
                    | DisasterRecoveryPhase::RollingBack
                    | DisasterRecoveryPhase::TearingDown
            )
        });
        assert!(
            !(updating && changing),
            "an update and a disaster-recovery change at once: {:?}",
            g.status
        );
        let now = match (updating, dr(&g)) {
            (true, _) => "Updating".to_string(),
            (false, Some(d)) => d.phase.as_str().to_string(),
            (false, None) => "None".to_string(),
        };
        if seen.last() != Some(&now) {
            seen.push(now);
        }
        if done(&g) {
            return Ok(seen);
        }
        anyhow::ensure!(std::time::Instant::now() < deadline, "timed out: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_and_disaster_recovery_changes_take_turns() -> anyhow::Result<()> {
    let ns = namespace("dr-turns").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 2}))?;
    ns.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {SECRET}\nstringData:\n  sharedSecret: {SHARED}\n"
    ))?;
    let gko = Operator::start(&ns);
    wait_settled(&ns).await?;
    let before = [template(&ns, CORE_HUB)?, template(&ns, CHRONOS)?];

    // A setup first; an update asked while Core Hub rolls out with it waits for the setup to end.
    patch_spec(&ns, spec_setup()).await?;
    wait_for_platform(&ns, "Core Hub rolling out the setup", |g| {
        dr(g).is_some_and(|d| d.components[0].state == DisasterRecoveryComponentState::RollingOut)
    })
    .await?;
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let seen = never_together(&ns, |g| {
        g.status.as_ref().is_some_and(|s| {
            s.update.is_none()
                && s.last_attempt
                    .as_ref()
                    .is_some_and(|a| a.target.as_deref() == Some("2.3.2.2"))
        })
    })
    .await?;
    assert_eq!(
        seen.first().map(String::as_str),
        Some("SettingUp"),
        "{seen:?}"
    );
    assert!(seen.contains(&"Updating".to_string()), "{seen:?}");
    let g = platforms(&ns).get("gluesync").await?;
    let (phase, since) = dr(&g).map(|d| (d.phase, d.since.clone())).unwrap();
    assert_eq!(phase, DisasterRecoveryPhase::Active);
    let attempt = g.status.clone().unwrap().last_attempt.unwrap();
    assert_eq!(
        attempt.result,
        gluesync_operator::api::UpdateResult::Succeeded
    );
    assert!(
        attempt.started_at.clone().unwrap().0 >= since.0,
        "the update started once the setup was Active: {attempt:?}"
    );
    // The update kept the pair.
    let t = template(&ns, CORE_HUB)?;
    assert!(t.contains("gluesync-core-hub:2.3.2.2"), "{t}");
    assert_carries(&t, "secondary", "dr-a.example.com")?;

    // An update first; a teardown asked while it runs waits for it to end.
    patch_spec(&ns, json!({"version": "2.3.2.1"})).await?;
    wait_for_platform(&ns, "the update to run", |g| {
        g.status.as_ref().and_then(|s| s.update.as_ref()).is_some()
    })
    .await?;
    patch_spec(&ns, json!({"disasterRecovery": null})).await?;
    let seen = never_together(&ns, |g| {
        dr(g).is_none() && g.status.as_ref().is_some_and(|s| s.update.is_none())
    })
    .await?;
    assert_eq!(
        seen.first().map(String::as_str),
        Some("Updating"),
        "{seen:?}"
    );
    assert_eq!(seen.last().map(String::as_str), Some("None"), "{seen:?}");
    // Back to the first Core Hub and no pair: Core Hub's pod template as at the start, byte for byte;
    // Chronos's differs only by its newer image (an unpinned module follows the catalog's latest).
    assert_eq!(template(&ns, CORE_HUB)?, before[0]);
    assert_eq!(
        template(&ns, CHRONOS)?,
        before[1].replace("gluesync-chronos:0.3.2", "gluesync-chronos:0.3.3")
    );
    gko.stop().await;
    Ok(())
}

/// A Secret GKO wrote whose `sharedSecret` was taken out by hand (its label kept) is refused like any
/// Secret without one, changes no workload, and is still emptied of GKO's mark once the setup is no
/// longer wanted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_of_gkos_without_its_key_is_refused_and_still_emptied() -> anyhow::Result<()> {
    let (ns, _sim) = site("dr-nokey").await?;
    ns.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {SECRET}\n  labels:\n    \
         gluesync.molo17.com/platform: gluesync\n"
    ))?;
    let labelled = secret(&ns)
        .await?
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default();
    assert_eq!(
        labelled
            .get("gluesync.molo17.com/platform")
            .map(String::as_str),
        Some("gluesync")
    );
    let gko = Operator::start(&ns);
    wait_settled(&ns).await?;
    let before = [template(&ns, CORE_HUB)?, template(&ns, CHRONOS)?];

    patch_spec(&ns, spec_setup()).await?;
    let g = wait_dr_phase(&ns, DisasterRecoveryPhase::Failed).await?;
    let message = dr(&g).unwrap().message.clone();
    assert!(
        message.starts_with("the disaster-recovery setup is refused: ")
            && message.contains(&format!("Secret {SECRET} has no sharedSecret")),
        "{message}"
    );
    assert_eq!([template(&ns, CORE_HUB)?, template(&ns, CHRONOS)?], before);
    assert_eq!(service(&ns).await?, None);

    patch_spec(&ns, json!({"disasterRecovery": null})).await?;
    wait_dr_gone(&ns).await?;
    assert_secret_empty(&ns).await?;
    assert_eq!([template(&ns, CORE_HUB)?, template(&ns, CHRONOS)?], before);
    gko.stop().await;
    Ok(())
}
