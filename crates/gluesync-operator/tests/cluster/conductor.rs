//! Cluster tests of the Conductor-compatible API the Core Hub UI calls.

use crate::common;

use common::*;
use gluesync_operator::api::{Phase, UpdateResult};
use serde_json::{Value, json};

struct Ui {
    http: reqwest::Client,
    base: String,
}

impl Ui {
    fn new(base: String) -> Ui {
        Ui {
            http: reqwest::Client::new(),
            base,
        }
    }

    async fn post(
        &self,
        path: &str,
        token: Option<&str>,
        body: impl Into<reqwest::Body>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        Ok((status, resp.json().await.unwrap_or(Value::Null)))
    }

    async fn get(&self, path: &str, cookie: Option<&str>) -> anyhow::Result<(u16, Value)> {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(c) = cookie {
            req = req.header("cookie", format!("theme=dark; gs-auth={c}"));
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        Ok((status, resp.json().await.unwrap_or(Value::Null)))
    }
}

/// A namespace with the sample install, the simulator as Core Hub, and GKO serving the Conductor API,
/// once GKO has reported a status.
async fn serving(
    hint: &str,
    spec: Value,
) -> anyhow::Result<(
    gko_test_support::TestNamespace,
    gluesync_simulator::Simulator,
    Operator,
    Ui,
)> {
    let ns = namespace(hint).await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, spec)?;
    let (gko, base) = Operator::start_serving(&ns)?;
    wait_for_platform(&ns, "a status", |g| {
        g.status.as_ref().is_some_and(|s| s.phase.is_some())
    })
    .await?;
    Ok((ns, sim, gko, Ui::new(base)))
}

/// The message of the UpdateStarted event on the GluesyncPlatform.
async fn started_event(ns: &gko_test_support::TestNamespace) -> anyhow::Result<String> {
    use k8s_openapi::api::events::v1::Event;
    let events: kube::Api<Event> = kube::Api::namespaced(ns.client.clone(), &ns.name);
    Ok(events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("UpdateStarted"))
        .and_then(|e| e.note)
        .unwrap_or_default())
}

fn update_all() -> String {
    json!({"action": "update", "ids": [], "releaseChannel": "ga"}).to_string()
}

async fn generation(ns: &gko_test_support::TestNamespace) -> anyhow::Result<i64> {
    Ok(platforms(ns)
        .get("gluesync")
        .await?
        .metadata
        .generation
        .unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_updates_the_platform_from_the_ui() -> anyhow::Result<()> {
    let ns = namespace("ui-update").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 0}))?;
    let (_gko, base) = Operator::start_serving(&ns)?;
    let ui = Ui::new(base);
    wait_available(&ns).await?;

    let (code, body) = ui.get("/conductor/api/health", None).await?;
    assert_eq!(
        (code, body),
        (200, json!({"success": true, "data": "Health check OK!"}))
    );

    // The UI lists the containers with its session cookie.
    let viewer = sim.token_for("viewer");
    let (code, body) = ui.get("/conductor/api/containers", Some(&viewer)).await?;
    assert_eq!(code, 200, "{body}");
    let containers = body["data"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let core = containers
        .iter()
        .find(|c| c["id"] == "gluesync-gluesync-core-hub")
        .unwrap();
    assert_eq!(core["type"], "core-hub");
    assert_eq!(core["info"]["parsedImage"]["tag"], "2.3.2.1");
    assert_eq!(core["info"]["state"], "running");
    let (_, modules) = ui.get("/containers?type=module", Some(&viewer)).await?;
    assert_eq!(
        modules["data"]["containers"].as_array().map(Vec::len),
        Some(3)
    );

    // What the UI reads to offer an update.
    let (code, body) = ui
        .get(
            "/conductor/api/services/gluesync-gluesync-core-hub/version/ga",
            Some(&viewer),
        )
        .await?;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["data"]["currentVersion"], "2.3.2.1");
    assert_eq!(body["data"]["latestVersionGA"], "2.3.2.2");
    assert_eq!(body["data"]["mandatoryUpdate"], true);
    assert_eq!(
        body["data"]["servicesToUpdate"],
        json!(["gluesync-gluesync-chronos"])
    );
    let (code, body) = ui
        .get("/services/nothing-here/version/ga", Some(&viewer))
        .await?;
    assert_eq!(
        (code, body["success"].clone()),
        (404, json!(false)),
        "{body}"
    );

    // Update all: the call answers once the update has ended, per component.
    let manager = sim.token_for("manager");
    let (code, body) = ui
        .post("/conductor/api/containers", Some(&manager), update_all())
        .await?;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(body["data"]["result"], "Succeeded");
    let results = body["data"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let status_of = |id: &str| {
        results
            .iter()
            .find(|c| c["id"] == id)
            .map(|c| c["status"].clone())
    };
    assert_eq!(status_of("gluesync-gluesync-core-hub"), Some(json!("OK")));
    assert_eq!(status_of("gluesync-gluesync-chronos"), Some(json!("OK")));

    // Who asked is recorded: the last attempt, the history entry and the UpdateStarted event name them.
    let g = platforms(&ns).get("gluesync").await?;
    let status = g.status.clone().unwrap_or_default();
    let by = status
        .last_attempt
        .as_ref()
        .and_then(|a| a.requested_by.clone());
    let by = by.expect("lastAttempt.requestedBy");
    assert_eq!(
        (by.username.as_deref(), by.role.as_deref(), by.via),
        (
            Some("manager"),
            Some("MANAGER"),
            gluesync_operator::api::RequestVia::Ui
        )
    );
    assert_eq!(status.history[0].requested_by.as_ref(), Some(&by));
    let started = started_event(&ns).await?;
    assert!(
        started.contains("asked by manager (MANAGER) from the Core Hub UI"),
        "{started}"
    );

    assert_eq!(
        g.spec.version, "2.3.2.2",
        "GKO wrote the version asked for into the spec"
    );
    assert!(
        g.spec
            .request_id
            .as_deref()
            .is_some_and(|r| r.starts_with("ui-"))
    );
    let fields = ns.kubectl(&[
        "get",
        "gsp",
        "gluesync",
        "--show-managed-fields",
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}",
    ])?;
    assert!(fields.contains("gluesync-operator"), "{fields}");
    let status = g.status.unwrap_or_default();
    assert_eq!(status.phase, Some(Phase::Current));
    assert_eq!(
        status.last_attempt.map(|a| a.result),
        Some(UpdateResult::Succeeded)
    );
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        "molo17/gluesync-core-hub:2.3.2.2"
    );
    // The listing follows the workloads: what was answered before the update is not answered again.
    let (code, body) = ui.get("/conductor/api/containers", Some(&viewer)).await?;
    assert_eq!(code, 200, "{body}");
    let core = body["data"]["containers"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == "gluesync-gluesync-core-hub"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(core["info"]["parsedImage"]["tag"], "2.3.2.2", "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_without_the_right_are_refused_and_nothing_changes() -> anyhow::Result<()> {
    let (ns, sim, gko, ui) = serving("ui-auth", json!({})).await?;
    let before = generation(&ns).await?;

    let viewer = sim.token_for("viewer");
    let (code, body) = ui
        .post("/conductor/api/containers", Some(&viewer), update_all())
        .await?;
    assert_eq!(
        (code, body["success"].clone()),
        (403, json!(false)),
        "{body}"
    );
    assert_eq!(body["error"], "Role VIEWER cannot control");

    let (code, body) = ui
        .post("/conductor/api/containers", None, update_all())
        .await?;
    assert_eq!(
        (code, body["error"].clone()),
        (401, json!("Not authenticated")),
        "{body}"
    );

    let (code, body) = ui
        .post(
            "/conductor/api/containers",
            Some("forged-token"),
            update_all(),
        )
        .await?;
    assert_eq!(
        (code, body["error"].clone()),
        (401, json!("Not authenticated")),
        "{body}"
    );

    // Core Hub down: no one can be verified, so no one passes.
    let manager = sim.token_for("manager");
    sim.update_faults(|f| f.down = true);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let (code, body) = ui
        .post("/conductor/api/containers", Some(&manager), update_all())
        .await?;
    assert_eq!(
        (code, body["error"].clone()),
        (401, json!("Authentication verification failed")),
        "{body}"
    );
    let (code, _) = ui.get("/conductor/api/containers", Some(&manager)).await?;
    assert_eq!(code, 401);

    assert_eq!(
        generation(&ns).await?,
        before,
        "a refused call changed the spec"
    );
    let g = platforms(&ns).get("gluesync").await?;
    assert!(g.status.unwrap_or_default().last_attempt.is_none());
    // Every answer is counted by its status: one 403, four 401s.
    let metrics = gko.metrics.render();
    let count = |status: &str| {
        metrics.lines().find_map(|l| {
            l.strip_prefix(&format!(
                "gluesync_operator_conductor_requests_total{{status=\"{status}\"}} "
            ))?
            .trim()
            .parse::<f64>()
            .ok()
        })
    };
    assert_eq!(count("403"), Some(1.0), "{metrics}");
    assert_eq!(count("401"), Some(4.0), "{metrics}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_gitops_the_ui_changes_nothing_and_git_updates() -> anyhow::Result<()> {
    let ns = namespace("ui-gitops").await?;
    let sim = simulator().await?;
    install_with_simulator(
        &ns,
        &sim,
        json!({"updatePolicy": "gitops", "stabilityWindowSeconds": 0}),
    )?;
    let (_gko, base) = Operator::start_serving(&ns)?;
    let ui = Ui::new(base);
    wait_for_platform(&ns, "a status", |g| {
        g.status.as_ref().is_some_and(|s| s.phase.is_some())
    })
    .await?;
    let before = generation(&ns).await?;
    let manager = sim.token_for("manager");
    let (code, body) = ui
        .post("/conductor/api/containers", Some(&manager), update_all())
        .await?;
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["error"], "Updates of this install are managed in Git");
    assert_eq!(generation(&ns).await?, before);

    // A commit (here: a change of spec.version) updates.
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let g = wait_for_platform(&ns, "the update", |g| {
        g.status
            .as_ref()
            .is_some_and(|s| s.update.is_none() && s.last_attempt.is_some())
    })
    .await?;
    assert_eq!(
        g.status.unwrap_or_default().last_attempt.map(|a| a.result),
        Some(UpdateResult::Succeeded)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_a_4xx_in_the_envelope_never_a_500() -> anyhow::Result<()> {
    let (ns, sim, _gko, ui) = serving("ui-bad", json!({})).await?;
    let before = generation(&ns).await?;
    let manager = sim.token_for("manager");
    let oversized = format!(r#"{{"action":"update","ids":["{}"]}}"#, "x".repeat(200_000));
    let cases: Vec<(&str, String, u16, &str)> = vec![
        (
            "/containers",
            "{not json".into(),
            400,
            "Invalid request body",
        ),
        (
            "/containers",
            r#"{"action":"explode","ids":[]}"#.into(),
            400,
            "Invalid action",
        ),
        (
            "/containers",
            r#"{"action":"update","releaseChannel":"stable"}"#.into(),
            400,
            "Invalid releaseChannel",
        ),
        (
            "/containers",
            r#"{"action":"stop","ids":["gluesync-gluesync-chronos"]}"#.into(),
            409,
            "Action stop is not available on Kubernetes",
        ),
        (
            "/containers",
            r#"{"action":"update","ids":["no-such-workload"]}"#.into(),
            404,
            "Unknown container",
        ),
        ("/containers", oversized, 413, "Request body too large"),
        (
            "/services",
            r#"{"services":[]}"#.into(),
            409,
            "Services are not managed here on Kubernetes",
        ),
        ("/no-such-route", "{}".into(), 404, "Not found"),
    ];
    for (path, body, want, error) in cases {
        for prefix in ["", "/conductor/api"] {
            let (code, answer) = ui
                .post(&format!("{prefix}{path}"), Some(&manager), body.clone())
                .await?;
            assert_eq!(code, want, "{prefix}{path}: {answer}");
            assert_eq!(answer["success"], false, "{prefix}{path}: {answer}");
            assert_eq!(answer["error"], error, "{prefix}{path}: {answer}");
        }
    }
    assert_eq!(
        generation(&ns).await?,
        before,
        "a bad request changed the spec"
    );

    let (code, doc) = ui.get("/openapi.json", None).await?;
    assert_eq!(code, 200);
    assert!(doc["paths"]["/containers"]["post"].is_object());
    Ok(())
}

/// A body over the limit is read to its end before the 413 goes out: answered mid-body, the connection
/// closed with the client's bytes unread, the kernel reset it, and the client, still sending, saw a
/// broken connection instead of the answer (about one request in 40 with 512 KiB on a 2-core machine,
/// hence the 200 of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_gets_its_413_every_time() -> anyhow::Result<()> {
    let (_ns, sim, _gko, ui) = serving("ui-oversized", json!({})).await?;
    let manager = sim.token_for("manager");
    let body = format!(
        r#"{{"action":"update","ids":["{}"]}}"#,
        "x".repeat(512 * 1024)
    );
    for attempt in 0..200 {
        let (code, answer) = ui
            .post("/containers", Some(&manager), body.clone())
            .await
            .map_err(|e| anyhow::anyhow!("attempt {attempt}: no answer: {e:#}"))?;
        assert_eq!(code, 413, "attempt {attempt}: {answer}");
        assert_eq!(answer["error"], "Request body too large", "{answer}");
    }
    // Beyond what is drained the connection closes after the answer; the API serves on. Asked on a
    // new connection: the client may have pooled the one just closed (its 413 came whole, the body
    // was in the socket's buffers), and a request on it would meet the close, not the API.
    // The 413 says so, when it arrives before the client's writes fail.
    let huge = "x".repeat(gluesync_operator::conductor::BODY_DRAIN_LIMIT * 2);
    let mut closed = 0;
    for _ in 0..5 {
        let sent = ui
            .http
            .post(format!("{}/containers", ui.base))
            .bearer_auth(&manager)
            .body(huge.clone())
            .send()
            .await;
        if let Ok(answer) = sent {
            assert_eq!(answer.status().as_u16(), 413);
            assert_eq!(
                answer.headers().get("connection").map(|v| v.as_bytes()),
                Some(&b"close"[..]),
                "a 413 beyond the drain limit closes its connection"
            );
            closed += 1;
        }
    }
    assert!(closed > 0, "no 413 arrived for a huge body in 5 tries");
    let ui = Ui::new(ui.base.clone());
    let (code, _) = ui.get("/openapi.json", None).await?;
    assert_eq!(code, 200, "the API stopped answering after a huge body");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_serves_https_from_a_certificate() -> anyhow::Result<()> {
    let ns = namespace("ui-https").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    // The certificate and key as a mounted kubernetes.io/tls Secret gives them.
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])?;
    let dir = std::env::temp_dir().join(format!("gko-tls-{}", ns.name));
    std::fs::create_dir_all(&dir)?;
    let files = gluesync_operator::conductor::TlsFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    };
    std::fs::write(&files.cert, cert.cert.pem())?;
    std::fs::write(&files.key, cert.signing_key.serialize_pem())?;
    let (_gko, base) = Operator::start_serving_tls(&ns, files)?;
    assert!(base.starts_with("https://"));
    wait_for_platform(&ns, "four components", |g| {
        g.status.as_ref().is_some_and(|s| s.components.len() == 4)
    })
    .await?;

    let trusting = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert.cert.pem().as_bytes())?)
        .build()?;
    let manager = sim.token_for("manager");
    let mut answer = None;
    for _ in 0..100 {
        if let Ok(r) = trusting
            .get(format!("{base}/conductor/api/containers"))
            .bearer_auth(&manager)
            .send()
            .await
        {
            answer = Some((r.status().as_u16(), r.json::<Value>().await?));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (code, body) = answer.ok_or_else(|| anyhow::anyhow!("no HTTPS answer"))?;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["data"]["containers"].as_array().map(Vec::len), Some(4));

    // Plain HTTP is not served on that port.
    let plain = reqwest::get(format!("{}/health", base.replace("https://", "http://"))).await;
    assert!(plain.map(|r| !r.status().is_success()).unwrap_or(true));

    // The certificate is renewed (cert-manager rewrites the mounted files): taken without a restart.
    let renewed = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])?;
    std::fs::write(&files_again(&dir).key, renewed.signing_key.serialize_pem())?;
    std::fs::write(&files_again(&dir).cert, renewed.cert.pem())?;
    let trusting_renewed = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(
            renewed.cert.pem().as_bytes(),
        )?)
        .build()?;
    gko_test_support::eventually(
        "the renewed certificate to be served",
        std::time::Duration::from_secs(30),
        || async {
            let ok = trusting_renewed
                .get(format!("{base}/health"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            Ok(ok.then_some(()))
        },
    )
    .await?;
    let old = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert.cert.pem().as_bytes())?)
        .build()?;
    assert!(
        old.get(format!("{base}/health")).send().await.is_err(),
        "the old certificate is not served any more"
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

fn files_again(dir: &std::path::Path) -> gluesync_operator::conductor::TlsFiles {
    gluesync_operator::conductor::TlsFiles {
        cert: dir.join("tls.crt"),
        key: dir.join("tls.key"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_different_update_request_while_one_runs_is_refused() -> anyhow::Result<()> {
    let ns = namespace("ui-second").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 3}))?;
    let (_gko, base) = Operator::start_serving(&ns)?;
    wait_available(&ns).await?;
    let manager = sim.token_for("manager");
    let first = {
        let (base, manager) = (base.clone(), manager.clone());
        tokio::spawn(async move {
            Ui::new(base)
                .post("/containers", Some(&manager), update_all())
                .await
        })
    };
    wait_for_platform(&ns, "phase Updating", |g| {
        g.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(Phase::Updating))
    })
    .await?;
    // Meanwhile the catalog offers a newer Core Hub: asking for it is another request, refused while
    // the first runs (the same request again would get the first one's answer).
    sim.set_catalog(
        "gluesync-core-hub",
        gluesync_simulator::CatalogEntry::all("2.3.2.3"),
    );
    let (code, body) = Ui::new(base)
        .post("/containers", Some(&manager), update_all())
        .await?;
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["error"], "An update is already running");
    let (code, body) = first.await??;
    assert_eq!(
        (code, body["data"]["result"].clone()),
        (200, json!("Succeeded")),
        "{body}"
    );
    let status = platforms(&ns)
        .get("gluesync")
        .await?
        .status
        .unwrap_or_default();
    assert_eq!(status.history.len(), 1);
    Ok(())
}

/// A catalog entry with its own latest version on GA and on beta (alpha as beta).
fn ga_beta(ga: &str, beta: &str) -> gluesync_simulator::CatalogEntry {
    gluesync_simulator::CatalogEntry {
        latest_version_ga: ga.into(),
        latest_version_beta: beta.into(),
        latest_version_alpha: beta.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_beta_update_all_runs_the_beta_versions() -> anyhow::Result<()> {
    let ns = namespace("ui-beta").await?;
    let sim = simulator().await?;
    sim.set_catalog("gluesync-core-hub", ga_beta("2.3.2.2", "2.3.3.0"));
    sim.set_catalog("gluesync-chronos", ga_beta("0.3.3", "0.3.4"));
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 0}))?;
    let (_gko, base) = Operator::start_serving(&ns)?;
    let ui = Ui::new(base);
    wait_available(&ns).await?;

    // The setup landed: GKO reads the two channels of the catalog apart.
    let viewer = sim.token_for("viewer");
    let (code, body) = ui
        .get(
            "/conductor/api/services/gluesync-gluesync-core-hub/version/beta",
            Some(&viewer),
        )
        .await?;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["data"]["latestVersionGA"], "2.3.2.2", "{body}");
    assert_eq!(body["data"]["latestVersionBeta"], "2.3.3.0", "{body}");
    assert_eq!(body["data"]["currentVersion"], "2.3.2.1", "{body}");

    // Update all on beta: the answer comes when the update has ended.
    let manager = sim.token_for("manager");
    let (code, body) = ui
        .post(
            "/conductor/api/containers",
            Some(&manager),
            json!({"action": "update", "ids": [], "releaseChannel": "beta"}).to_string(),
        )
        .await?;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["success"], true, "{body}");
    assert_eq!(body["data"]["result"], "Succeeded", "{body}");
    let results = body["data"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let status_of = |id: &str| {
        results
            .iter()
            .find(|c| c["id"] == id)
            .map(|c| c["status"].clone())
    };
    assert_eq!(
        status_of("gluesync-gluesync-core-hub"),
        Some(json!("OK")),
        "{body}"
    );
    assert_eq!(
        status_of("gluesync-gluesync-chronos"),
        Some(json!("OK")),
        "{body}"
    );

    let g = platforms(&ns).get("gluesync").await?;
    assert_eq!(
        g.spec.version, "2.3.3.0",
        "the beta version, not GA's 2.3.2.2"
    );
    assert_eq!(
        g.spec.release_channel,
        gluesync_operator::api::ReleaseChannel::Ga,
        "the UI's channel is for this request only"
    );
    let request_id = g.spec.request_id.clone().unwrap_or_default();
    assert!(request_id.starts_with("ui-"), "{request_id}");
    let annotation = g
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("gluesync.molo17.com/request"))
        .cloned()
        .unwrap_or_default();
    let request: Value = serde_json::from_str(&annotation)
        .map_err(|e| anyhow::anyhow!("annotation {annotation:?}: {e}"))?;
    assert_eq!(request["channel"], "beta", "{annotation}");
    assert_eq!(request["id"], request_id.as_str(), "{annotation}");
    let status = g.status.clone().unwrap_or_default();
    let attempt = status.last_attempt.clone().unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    assert_eq!(attempt.target.as_deref(), Some("2.3.3.0"));
    assert_eq!(attempt.request_id.as_deref(), Some(request_id.as_str()));
    assert_eq!(status.version.as_deref(), Some("2.3.3.0"));
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        "molo17/gluesync-core-hub:2.3.3.0"
    );
    // The modules follow Core Hub on the request's channel too.
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-chronos").await?,
        "molo17/gluesync-chronos:0.3.4"
    );

    // What the UI reads to offer the next update is computed on the channel it asks about: a Chronos
    // newer than the one that runs on beta only.
    sim.set_catalog("gluesync-chronos", ga_beta("0.3.4", "0.3.5"));
    let (code, body) = ui
        .get(
            "/conductor/api/services/gluesync-gluesync-core-hub/version/beta",
            Some(&viewer),
        )
        .await?;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["data"]["currentVersion"], "2.3.3.0", "{body}");
    assert_eq!(body["data"]["releaseChannel"], "beta", "{body}");
    assert_eq!(
        body["data"]["servicesToUpdate"],
        json!(["gluesync-gluesync-chronos"]),
        "{body}"
    );
    assert_eq!(body["data"]["mandatoryUpdate"], true, "{body}");
    let (code, body) = ui
        .get(
            "/conductor/api/services/gluesync-gluesync-core-hub/version/ga",
            Some(&viewer),
        )
        .await?;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["data"]["releaseChannel"], "ga", "{body}");
    assert_eq!(body["data"]["servicesToUpdate"], json!([]), "{body}");
    assert_eq!(body["data"]["mandatoryUpdate"], false, "{body}");

    // Update all on GA while the beta runs: GA's versions are older, and nothing is taken back.
    let (code, body) = ui
        .post(
            "/conductor/api/containers",
            Some(&manager),
            json!({"action": "update", "ids": [], "releaseChannel": "ga"}).to_string(),
        )
        .await?;
    assert!(code == 200 || code == 409, "{code} {body}");
    let g = platforms(&ns).get("gluesync").await?;
    assert_eq!(
        g.spec.version, "2.3.3.0",
        "Core Hub is not taken back to GA's 2.3.2.2"
    );
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        "molo17/gluesync-core-hub:2.3.3.0"
    );
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-chronos").await?,
        "molo17/gluesync-chronos:0.3.4"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_one_module_after_a_ui_update_moves_no_other() -> anyhow::Result<()> {
    let ns = namespace("ui-pin").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({"stabilityWindowSeconds": 0}))?;
    let (_gko, base) = Operator::start_serving(&ns)?;
    let ui = Ui::new(base);
    wait_available(&ns).await?;
    let manager = sim.token_for("manager");
    let (code, body) = ui
        .post("/conductor/api/containers", Some(&manager), update_all())
        .await?;
    assert_eq!(
        (code, body["data"]["result"].clone()),
        (200, json!("Succeeded")),
        "{body}"
    );
    let g = platforms(&ns).get("gluesync").await?;
    let request_id = g.spec.request_id.clone();
    assert!(
        request_id.as_deref().is_some_and(|r| r.starts_with("ui-")),
        "{request_id:?}"
    );
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-chronos").await?,
        "molo17/gluesync-chronos:0.3.3"
    );

    // The catalog now offers a newer Chronos and Prometheus than run: an update that took every module
    // to the catalog's latest would move them.
    sim.set_catalog(
        "gluesync-chronos",
        gluesync_simulator::CatalogEntry::all("0.3.4"),
    );
    sim.set_catalog(
        "prometheus",
        gluesync_simulator::CatalogEntry::all("2.54.0"),
    );
    let viewer = sim.token_for("viewer");
    let (code, body) = ui
        .get(
            "/conductor/api/services/gluesync-gluesync-core-hub/version/ga",
            Some(&viewer),
        )
        .await?;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body["data"]["servicesToUpdate"],
        json!(["gluesync-gluesync-chronos", "gluesync-gluesync-prometheus"]),
        "the newer Chronos and Prometheus are offered: {body}"
    );

    // Pin Grafana only, keeping the pins the UI wrote and its requestID.
    let mut modules = g.spec.modules.clone();
    modules.insert("gluesync-gluesync-grafana".into(), "11.3.0".into());
    patch_spec(&ns, json!({ "modules": modules })).await?;
    let pinned = platforms(&ns).get("gluesync").await?;
    let generation = pinned.metadata.generation.unwrap_or(0);
    assert!(generation > g.metadata.generation.unwrap_or(0));
    assert_eq!(pinned.spec.request_id, request_id, "the requestID stayed");
    assert_eq!(pinned.spec.modules, modules);

    let g = wait_finished(&ns, generation).await?;
    let status = g.status.unwrap_or_default();
    let attempt = status.last_attempt.unwrap();
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    assert_eq!(attempt.generation, Some(generation));
    assert_eq!(status.history.len(), 2, "the UI's update, then the pin");
    assert_eq!(
        image_of(&ns, "deployment", "gluesync-gluesync-grafana").await?,
        "molo17/grafana:11.3.0"
    );
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-chronos").await?,
        "molo17/gluesync-chronos:0.3.3",
        "Chronos moved"
    );
    assert_eq!(
        image_of(&ns, "deployment", "gluesync-gluesync-prometheus").await?,
        "molo17/prometheus:2.53.0",
        "Prometheus moved"
    );
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        "molo17/gluesync-core-hub:2.3.2.2"
    );
    let by_name = |n: &str| {
        attempt
            .results
            .iter()
            .find(|r| r.name == n)
            .map(|r| r.status)
    };
    use gluesync_operator::api::ComponentResultStatus;
    assert_eq!(
        by_name("gluesync-gluesync-grafana"),
        Some(ComponentResultStatus::Ok)
    );
    for other in [
        "gluesync-gluesync-core-hub",
        "gluesync-gluesync-chronos",
        "gluesync-gluesync-prometheus",
    ] {
        assert_eq!(
            by_name(other),
            Some(ComponentResultStatus::Skipped),
            "{other}: {attempt:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_learn_nothing_and_cross_site_posts_are_refused() -> anyhow::Result<()> {
    let (ns, sim, _gko, ui) = serving("ui-strangers", json!({})).await?;
    let before = generation(&ns).await?;
    let http = reqwest::Client::new();

    // A caller Core Hub does not know gets 401 for every route but /health and /openapi.json, whatever
    // the body: the API does not tell them what it would refuse or what exists.
    for (path, body) in [
        (
            "/containers",
            r#"{"action":"stop","ids":["gluesync-gluesync-chronos"]}"#,
        ),
        ("/containers", "{not json"),
        (
            "/containers",
            r#"{"action":"update","ids":["no-such-workload"]}"#,
        ),
        ("/services", "{}"),
        ("/no-such-route", "{}"),
    ] {
        for prefix in ["", "/conductor/api"] {
            let (code, answer) = ui
                .post(&format!("{prefix}{path}"), Some("made-up-token"), body)
                .await?;
            assert_eq!(code, 401, "{prefix}{path}: {answer}");
            let (code, _) = ui.post(&format!("{prefix}{path}"), None, body).await?;
            assert_eq!(code, 401, "{prefix}{path} without credentials");
        }
    }
    for path in ["/health", "/openapi.json"] {
        assert_eq!(ui.get(path, None).await?.0, 200, "{path} is open");
    }

    // A manager's session cookie on a cross-site form post, or on a request that is not JSON: refused.
    let manager = sim.token_for("manager");
    let post = |origin: Option<&str>, content_type: &str| {
        let mut req = http
            .post(format!("{}/conductor/api/containers", ui.base))
            .header("cookie", format!("gs-auth={manager}"))
            .header("content-type", content_type)
            .body(r#"{"action":"update","ids":[]}"#);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        req.send()
    };
    let resp = post(Some("https://evil.example"), "application/json").await?;
    assert_eq!(resp.status().as_u16(), 403);
    assert_eq!(
        resp.json::<Value>().await?["error"],
        "Cross-site request refused"
    );
    let resp = post(None, "application/x-www-form-urlencoded").await?;
    assert_eq!(resp.status().as_u16(), 403);
    assert_eq!(generation(&ns).await?, before, "nothing was changed");

    // With self-update off, GKO's own Deployment cannot be updated from the UI: said clearly, nothing done.
    patch_spec(&ns, json!({"selfUpdate": {"enabled": false}})).await?;
    let before = generation(&ns).await?;
    ns.apply(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: gluesync-operator
  labels: {com.molo17.conductor.type: operator}
spec:
  replicas: 1
  selector: {matchLabels: {app: gluesync-operator}}
  template:
    metadata: {labels: {app: gluesync-operator}}
    spec: {containers: [{name: gluesync-operator, image: "molo17/gluesync-operator:0.1.0"}]}
"#,
    )?;
    let body = json!({"action": "update", "ids": ["gluesync-operator"]}).to_string();
    let answer = gko_test_support::eventually(
        "the own Deployment to be known",
        std::time::Duration::from_secs(30),
        || {
            let body = body.clone();
            let ui = &ui;
            let manager = manager.clone();
            async move {
                let (code, answer) = ui.post("/containers", Some(&manager), body).await?;
                Ok((code == 409).then_some(answer))
            }
        },
    )
    .await?;
    assert_eq!(
        answer["error"], "GKO does not update itself here",
        "{answer}"
    );
    assert_eq!(generation(&ns).await?, before, "nothing was changed");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bad_tokens_costs_core_hub_little_and_a_known_manager_is_served()
-> anyhow::Result<()> {
    use futures::StreamExt;
    let (_ns, sim, _gko, ui) = serving("ui-flood", json!({})).await?;
    // The manager's session is already known, as when the UI is open.
    let manager = sim.token_for("manager");
    assert_eq!(ui.get("/containers", Some(&manager)).await?.0, 200);
    let before = sim.calls().me;
    let started = std::time::Instant::now();
    let ui = &ui;
    let flood = futures::stream::iter(0..600)
        .map(|i| async move {
            ui.get("/containers", Some(&format!("made-up-{i}")))
                .await
                .map(|(c, _)| c)
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>();
    let in_the_middle = async {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        ui.get("/conductor/api/containers", Some(&manager)).await
    };
    let (codes, manager_answer) = tokio::join!(flood, in_the_middle);
    let elapsed = started.elapsed().as_secs_f64();
    let checks = sim.calls().me - before;
    let codes: Vec<u16> = codes.into_iter().collect::<Result<_, _>>()?;
    assert!(
        codes.iter().all(|c| *c == 401 || *c == 429),
        "only 401 and 429: {codes:?}"
    );
    assert!(codes.contains(&429), "the ration was reached");
    assert_eq!(manager_answer?.0, 200, "the manager is served meanwhile");
    // At most the burst and 20 checks a second reached Core Hub.
    assert!(
        (checks as f64) <= 20.0 * elapsed + 21.0,
        "{checks} identity checks in {elapsed:.2} s"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_flooding_new_credentials_is_rationed_and_others_are_served() -> anyhow::Result<()>
{
    use futures::StreamExt;
    let (_ns, sim, _gko, ui) = serving("ui-client-ration", json!({})).await?;
    // Three clients, told apart by address (all of 127.0.0.0/8 is this machine).
    let from = |last: u8| {
        reqwest::Client::builder()
            .local_address(std::net::IpAddr::from([127, 0, 0, last]))
            .build()
    };
    let (busy, newcomer, known) = (from(2)?, from(3)?, from(4)?);
    let url = format!("{}/containers", ui.base);
    let url = &url;
    let manager = sim.token_for("manager");
    assert_eq!(
        known.get(url).bearer_auth(&manager).send().await?.status(),
        200
    );
    let before = sim.calls().me;
    let started = std::time::Instant::now();
    let busy = &busy;
    let answers: Vec<(u16, Option<String>)> = futures::stream::iter(0..60)
        .map(|i| async move {
            let resp = busy
                .get(url)
                .bearer_auth(format!("made-up-{i}"))
                .send()
                .await?;
            let retry = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            anyhow::Ok((resp.status().as_u16(), retry))
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let elapsed = started.elapsed().as_secs_f64();
    let checks = sim.calls().me - before;
    let refused: Vec<_> = answers.iter().filter(|(c, _)| *c == 429).collect();
    assert!(
        answers.iter().all(|(c, _)| *c == 401 || *c == 429),
        "{answers:?}"
    );
    assert!(
        !refused.is_empty(),
        "the client's ration was reached: {answers:?}"
    );
    assert!(
        refused.iter().all(|(_, r)| r
            .as_deref()
            .is_some_and(|r| r.parse::<u64>().is_ok_and(|s| s >= 1))),
        "every 429 says when to come back: {refused:?}"
    );
    // The busy client got its own burst and rate, not the whole of Core Hub's.
    assert!(
        (checks as f64) <= 10.0 + 5.0 * elapsed + 1.0,
        "{checks} identity checks in {elapsed:.2} s for one client"
    );
    // Meanwhile a new caller from elsewhere is checked and served at once.
    let newcomer_token = sim.token_for("monitor");
    assert_eq!(
        newcomer
            .get(url)
            .bearer_auth(&newcomer_token)
            .send()
            .await?
            .status(),
        200
    );
    // A caller GKO knows costs a cache look-up and is not rationed.
    let known = &known;
    let manager = &manager;
    let codes: Vec<u16> = futures::stream::iter(0..400)
        .map(|_| async move {
            anyhow::Ok(
                known
                    .get(url)
                    .bearer_auth(manager)
                    .send()
                    .await?
                    .status()
                    .as_u16(),
            )
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    assert!(codes.iter().all(|c| *c == 200), "{codes:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conductor_port_already_taken_makes_gko_not_ready() -> anyhow::Result<()> {
    let ns = namespace("ui-port-taken").await?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = taken.local_addr()?.to_string();
    let gko = Gko::spawn(
        &ns,
        GkoOptions {
            conductor_addr: Some(addr),
            ..Default::default()
        },
    )?;
    // It reports what runs (its caches are filled), and says it is not ready: the UI cannot reach it.
    wait_settled(&ns).await?;
    gko.wait_for_line(
        "the Conductor API cannot serve",
        std::time::Duration::from_secs(30),
    )
    .await?;
    let ready = gko.metrics_url.replace("/metrics", "/readyz");
    let status = reqwest::get(&ready).await?.status().as_u16();
    assert_eq!(status, 503);
    drop(taken);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_is_cut_off() -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_ns, _sim, _gko, ui) = serving("ui-slow", json!({})).await?;
    let addr = ui.base.trim_start_matches("http://").to_string();
    let mut slow = tokio::net::TcpStream::connect(&addr).await?;
    // Headers begun, never finished.
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: gko\r\n")
        .await?;
    let mut buf = [0u8; 256];
    // It holds the connection for a while (the slow client is really there)...
    assert!(
        tokio::time::timeout(std::time::Duration::from_secs(2), slow.read(&mut buf))
            .await
            .is_err(),
        "the connection is open while the headers are coming"
    );
    // ...and is cut off once the header-read timeout passes.
    let cut = tokio::time::timeout(
        gluesync_operator::conductor::HEADER_READ_TIMEOUT + std::time::Duration::from_secs(10),
        slow.read(&mut buf),
    )
    .await
    .expect("the server closed the slow connection");
    assert!(matches!(cut, Ok(0) | Err(_)), "{cut:?}");
    // A normal client is served meanwhile.
    assert_eq!(ui.get("/health", None).await?.0, 200);
    Ok(())
}

/// The UI's update on the user's terms: outside every window it is `Scheduled` with the window's start,
/// under `approval: manual` it waits for its approval; in both, nothing is paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_from_the_ui_outside_the_window_is_scheduled_and_a_supervised_one_waits()
-> anyhow::Result<()> {
    // A window that opened an hour ago and lasted a minute: closed until tomorrow.
    let hour_ago = jiff::Timestamp::now()
        .checked_sub(jiff::SignedDuration::from_hours(1))?
        .strftime("%H:%M")
        .to_string();
    let (ns, sim, _gko, ui) = serving(
        "ui-window",
        json!({"maintenanceWindows": [{"start": hour_ago, "durationMinutes": 1}]}),
    )
    .await?;
    wait_settled(&ns).await?;
    let manager = sim.token_for("manager");
    let (code, body) = ui
        .post("/conductor/api/containers", Some(&manager), update_all())
        .await?;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["data"]["result"], "Scheduled", "{body}");
    let g = platforms(&ns).get("gluesync").await?;
    let next = g
        .status
        .as_ref()
        .and_then(|s| s.next_window.clone())
        .unwrap();
    assert_eq!(
        body["data"]["scheduledAt"],
        serde_json::to_value(&next)?,
        "{body}"
    );
    assert!(
        next.0 > jiff::Timestamp::now(),
        "the next window is ahead: {next:?}"
    );
    assert!(
        g.status.as_ref().unwrap().update.is_none(),
        "no update started"
    );
    assert!(sim.calls().enter.is_empty(), "nothing paused");

    // Supervised instead: the answer says the update waits for its approval, with its approvalID.
    patch_spec(
        &ns,
        json!({"maintenanceWindows": null, "approval": "manual"}),
    )
    .await?;
    let g = wait_for_platform(&ns, "the update to wait for its approval", |g| {
        g.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.reason == "WaitingForApproval")
        })
    })
    .await?;
    let id = g.status.unwrap().update.unwrap().approval_id.unwrap();
    let (code, body) = ui
        .post("/conductor/api/containers", Some(&manager), update_all())
        .await?;
    assert_eq!(code, 202, "{body}");
    assert_eq!(body["data"]["result"], "WaitingForApproval", "{body}");
    assert_eq!(body["data"]["approvalID"], id.as_str(), "{body}");
    assert!(sim.calls().enter.is_empty(), "nothing paused");
    Ok(())
}
