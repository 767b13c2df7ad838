//! The charts, installed as platform teams install them: the real helm and kubectl on the local control
//! plane. The kit (`charts/gluesync-kit`, release `gluesync`) brings the sample workloads, the
//! GluesyncPlatform and GKO (`charts/gluesync-operator`). The control plane runs no containers, so GKO's
//! pod is simulated; the GKO these tests run is the binary, started the way the chart's Deployment starts
//! it: with the chart's ServiceAccount token and nothing else, the Deployment's environment, and the
//! Conductor API's certificate from the chart's Secret.

use crate::common;

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, bail};
use common::*;
use gko_test_support::TestNamespace;
use gluesync_operator::api::{Phase, UpdateResult};
use serde_json::{Value, json};

/// GKO's objects in the kit installed as release `gluesync`.
const GKO: &str = "gluesync-gluesync-operator";
const CORE_HUB: &str = "gluesync-gluesync-core-hub";

fn charts() -> PathBuf {
    gko_test_support::repo_root().join("charts")
}

/// A server-side dry run of `rendered` in the test's namespace: whether the API server accepts it, and
/// what kubectl said.
fn dry_run(ns: &TestNamespace, rendered: &str) -> anyhow::Result<(bool, String)> {
    ns.kubectl_status(
        &["apply", "--dry-run=server", "--server-side", "-f", "-"],
        Some(rendered),
    )
}

/// The Prometheus Operator's CRDs of the kinds the chart renders (ServiceMonitor, PodMonitor,
/// PrometheusRule), applied to the control plane once, so that a server-side dry run checks those objects
/// against their real schemas.
fn monitoring_crds(ns: &TestNamespace) -> anyhow::Result<()> {
    static APPLIED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut applied = APPLIED.lock().unwrap();
    if *applied {
        return Ok(());
    }
    let script = gko_test_support::repo_root().join("hack/controlplane.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg("monitoring-crds")
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "hack/controlplane.sh monitoring-crds: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    for plural in ["servicemonitors", "podmonitors", "prometheusrules"] {
        let file = dir.join(format!("monitoring.coreos.com_{plural}.yaml"));
        ns.kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &file.display().to_string(),
        ])?;
        ns.kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/{plural}.monitoring.coreos.com"),
        ])?;
    }
    *applied = true;
    Ok(())
}

/// What helm says when it refuses to render `chart` with these `--set` values (a panic when it renders).
fn refusal(ns: &TestNamespace, chart: &str, sets: &[&str]) -> String {
    let mut args = vec!["template", "gluesync", chart];
    for v in sets {
        args.extend(["--set", v]);
    }
    helm(ns, &args)
        .expect_err("helm should refuse these values")
        .to_string()
}

/// The values every test installs with: Core Hub and the catalog at the simulator, a short stability
/// window, and GKO's pod ready at once. The definition is the shared cluster's, installed by the tests
/// (`install_crd`), as an administrator installs it for several releases: tests/cluster/crds.rs installs it with
/// the chart.
fn sets(sim: &gluesync_simulator::Simulator) -> Vec<String> {
    vec![
        "operator.crds.install=false".into(),
        format!("operator.platform.coreHub.url={}", sim.url),
        format!("operator.platform.catalog.url={}", sim.url),
        "operator.platform.stabilityWindowSeconds=1".into(),
        "operator.platform.stabilityTimeoutSeconds=60".into(),
        "operator.minReadySeconds=0".into(),
    ]
}

/// `helm install` (or `upgrade`, ...) of the kit with `sets` and `extra`.
fn helm_kit(
    ns: &TestNamespace,
    verb: &[&str],
    sim: &gluesync_simulator::Simulator,
    extra: &[&str],
) -> anyhow::Result<String> {
    let chart = kit()?;
    let mut args: Vec<String> = verb.iter().map(|s| s.to_string()).collect();
    args.push("gluesync".into());
    args.push(chart);
    for s in sets(sim)
        .iter()
        .map(String::as_str)
        .chain(extra.iter().copied())
    {
        args.push("--set".into());
        args.push(s.into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    helm(ns, &args)
}

/// A namespace with the Core Hub credentials, and the kit installed in it.
async fn install_kit(
    hint: &str,
    extra: &[&str],
) -> anyhow::Result<(TestNamespace, gluesync_simulator::Simulator)> {
    let ns = namespace(hint).await?;
    let sim = simulator().await?;
    ns.apply(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: corehub-credentials\nstringData:\n  username: admin\n  password: admin\n",
    )?;
    helm_kit(&ns, &["install"], &sim, extra)?;
    Ok((ns, sim))
}

/// GKO as the chart's Deployment runs it: the ServiceAccount's token alone, the container's environment,
/// the Conductor API's certificate from the chart's Secret. Answers GKO and the Conductor API's base URL
/// (the Service's name, resolved to the loopback listener).
struct ChartGko {
    gko: Gko,
    base: String,
    http: reqwest::Client,
    _dir: TempDir,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `extra`: environment added to the Deployment's (a fault point).
fn start_chart_gko(ns: &TestNamespace, extra: &[(&str, &str)]) -> anyhow::Result<ChartGko> {
    let dir = std::env::temp_dir().join(format!("gko-helm-{}", ns.name));
    std::fs::create_dir_all(&dir)?;
    let dir = TempDir(dir);
    // The kubeconfig of the control plane, with the ServiceAccount's token as the only credential.
    let token = ns.kubectl(&["create", "token", GKO, "--duration=2h"])?;
    let mut kubeconfig: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&ns.cp.kubeconfig)?)?;
    let users = kubeconfig
        .get_mut("users")
        .and_then(|u| u.as_sequence_mut())
        .context("the kubeconfig has users")?;
    for user in users {
        user["user"] = serde_yaml::to_value(json!({"token": token.trim()}))?;
    }
    let kubeconfig_path = dir.0.join("kubeconfig");
    std::fs::write(&kubeconfig_path, serde_yaml::to_string(&kubeconfig)?)?;

    // The container's environment, as the kubelet would give it.
    let deployment: Value =
        serde_json::from_str(&ns.kubectl(&["get", "deploy", GKO, "-o", "json"])?)?;
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mut env = vec![];
    for e in container["env"].as_array().context("env")? {
        let name = e["name"].as_str().context("env name")?.to_string();
        let value = match (
            &e["value"],
            e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        ) {
            (Value::String(v), _) => v.clone(),
            (_, Some("metadata.namespace")) => ns.name.clone(),
            (_, Some("metadata.name")) => format!("{GKO}-0"),
            other => bail!("env {name}: {other:?}"),
        };
        env.push((name, value));
    }
    // The mounted certificate: the Secret's files, where the Deployment says they are.
    let mount = container["volumeMounts"][0]["mountPath"]
        .as_str()
        .context("the TLS Secret is mounted")?;
    let secret: Value = serde_json::from_str(&ns.kubectl(&[
        "get",
        "secret",
        &format!("{GKO}-conductor-tls"),
        "-o",
        "json",
    ])?)?;
    let decode = |key: &str| -> anyhow::Result<Vec<u8>> {
        let b64 = secret["data"][key].as_str().context("TLS data")?;
        let out = std::process::Command::new("base64")
            .arg("-d")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().expect("piped").write_all(b64.as_bytes())?;
                c.wait_with_output()
            })?;
        Ok(out.stdout)
    };
    let cert = decode("tls.crt")?;
    std::fs::write(dir.0.join("tls.crt"), &cert)?;
    std::fs::write(dir.0.join("tls.key"), decode("tls.key")?)?;
    for (k, v) in env.iter_mut() {
        if let Some(file) = v.strip_prefix(&format!("{mount}/")) {
            assert!(k.starts_with("GKO_CONDUCTOR_TLS_"), "{k}");
            *v = dir.0.join(file).display().to_string();
        }
    }
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let port = gko_test_support::free_addr()?.port();
    let gko = Gko::spawn(
        ns,
        GkoOptions {
            instance: Some(format!("{GKO}-0")),
            kubeconfig: Some(kubeconfig_path),
            env,
            conductor_addr: Some(format!("127.0.0.1:{port}")),
            ..Default::default()
        },
    )?;
    // The Service's name, verified against the chart's certificate.
    let host = format!("{GKO}.{}.svc", ns.name);
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&cert)?)
        .resolve(&host, ([127, 0, 0, 1], port).into())
        .build()?;
    Ok(ChartGko {
        gko,
        base: format!("https://{host}:{port}/conductor/api"),
        http,
        _dir: dir,
    })
}

fn generation(ns: &TestNamespace) -> anyhow::Result<i64> {
    Ok(ns
        .kubectl(&[
            "get",
            "gsp",
            "gluesync",
            "-o",
            "jsonpath={.metadata.generation}",
        ])?
        .parse()?)
}

/// The platform's last update succeeded.
fn assert_succeeded(g: &gluesync_operator::api::GluesyncPlatform) -> anyhow::Result<()> {
    let attempt = g
        .status
        .as_ref()
        .and_then(|s| s.last_attempt.as_ref())
        .context("an attempt")?;
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    Ok(())
}

fn spec_version(ns: &TestNamespace) -> anyhow::Result<String> {
    ns.kubectl(&["get", "gsp", "gluesync", "-o", "jsonpath={.spec.version}"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_lint_and_render_what_the_api_server_accepts() -> anyhow::Result<()> {
    let ns = namespace("helm-render").await?;
    let sim = simulator().await?;
    let kit = kit()?;
    let operator = charts().join("gluesync-operator").display().to_string();
    helm(&ns, &["lint", "--strict", &kit])?;
    helm(
        &ns,
        &[
            "lint",
            "--strict",
            &operator,
            "--set",
            "platform.version=2.3.2.1",
        ],
    )?;
    // Server-side dry run of everything both charts render, for both policies.
    for (chart, extra) in [
        (&kit, "operator.updatePolicy=gitops"),
        (&operator, "platform.version=2.3.2.1"),
    ] {
        let mut args = vec!["template", "gluesync", chart.as_str(), "--set", extra];
        let s = sets(&sim);
        if chart == &kit {
            for v in &s {
                args.extend(["--set", v.as_str()]);
            }
        }
        let rendered = helm(&ns, &args)?;
        assert!(rendered.contains("kind: GluesyncPlatform"), "{rendered}");
        let (ok, out) = dry_run(&ns, &rendered)?;
        assert!(ok, "the API server refuses what {chart} renders: {out}");
    }
    // Wrong values are refused with a message that says what is wrong.
    let refused = refusal(&ns, &operator, &["platform.version=2.3.x"]);
    assert!(refused.contains("/platform/version"), "{refused}");
    let refused = refusal(
        &ns,
        &operator,
        &["platform.version=2.3.2.1", "platform.updatePolicy=git"],
    );
    assert!(refused.contains("'ui', 'gitops'"), "{refused}");
    let refused = helm(&ns, &["template", "gluesync", &operator])
        .unwrap_err()
        .to_string();
    assert!(refused.contains("platform.version"), "{refused}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kit_installs_and_helm_upgrade_keeps_what_the_ui_updated() -> anyhow::Result<()> {
    let (ns, sim) = install_kit("helm-ui", &[]).await?;
    // The catalog knows nothing newer than what is installed: the install is Current.
    sim.set_catalog(
        "gluesync-core-hub",
        gluesync_simulator::CatalogEntry::all("2.3.2.1"),
    );
    sim.set_catalog(
        "gluesync-chronos",
        gluesync_simulator::CatalogEntry::all("0.3.2"),
    );
    let gko = start_chart_gko(&ns, &[])?;
    wait_for_platform(&ns, "phase Current", |g| {
        g.status.as_ref().and_then(|s| s.phase) == Some(Phase::Current)
    })
    .await?;
    let table = ns.kubectl(&["get", "gsp"])?;
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|l| l.contains("Current") && l.contains("2.3.2.1")),
        "{table}"
    );

    // A newer Core Hub appears, and a manager updates from the UI through the chart's Service and TLS.
    sim.set_catalog(
        "gluesync-core-hub",
        gluesync_simulator::CatalogEntry::all("2.3.2.2"),
    );
    sim.set_catalog(
        "gluesync-chronos",
        gluesync_simulator::CatalogEntry::all("0.3.3"),
    );
    ns.kubectl(&[
        "annotate",
        "gsp",
        "gluesync",
        "--overwrite",
        "gluesync.molo17.com/check-now=1",
    ])?;
    wait_available(&ns).await?;
    let asked = generation(&ns)? + 1;
    let resp = gko
        .http
        .post(format!("{}/containers", gko.base))
        .bearer_auth(sim.token_for("manager"))
        .json(&json!({"action": "update", "ids": []}))
        .send()
        .await?;
    let status = resp.status().as_u16();
    let answer: Value = resp.json().await?;
    assert_eq!(status, 200, "{answer}");
    let g = wait_finished(&ns, asked).await?;
    assert_succeeded(&g)?;
    assert_eq!(
        image_of(&ns, "statefulset", CORE_HUB).await?,
        "molo17/gluesync-core-hub:2.3.2.2"
    );
    let chronos_before = image_of(&ns, "statefulset", "gluesync-gluesync-chronos").await?;
    assert_eq!(chronos_before, "molo17/gluesync-chronos:0.3.3");
    let settled = generation(&ns)?;

    // helm upgrade with the values unchanged (the kit still says 2.3.2.1) keeps what the UI did.
    helm_kit(&ns, &["upgrade", "--reuse-values"], &sim, &[])?;
    assert_eq!(spec_version(&ns)?, "2.3.2.2");
    assert_eq!(
        image_of(&ns, "statefulset", CORE_HUB).await?,
        "molo17/gluesync-core-hub:2.3.2.2"
    );
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-chronos").await?,
        chronos_before
    );
    assert_eq!(
        generation(&ns)?,
        settled,
        "the upgrade changed nothing of the spec"
    );
    let manifest = helm(&ns, &["get", "manifest", "gluesync"])?;
    assert!(
        manifest.contains("version: \"2.3.2.2\""),
        "the release renders the live version"
    );
    drop(gko);
    Ok(())
}

/// Under gitops too, `helm upgrade` keeps the live `spec.requestID`: a retry made with kubectl is not
/// undone by the next upgrade (which would count as a new request and move unpinned modules).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_gitops_helm_upgrade_keeps_a_retry_made_with_kubectl() -> anyhow::Result<()> {
    let (ns, sim) = install_kit(
        "helm-gitops-retry",
        &[
            "operator.updatePolicy=gitops",
            "operator.platform.requestID=from-git-1",
        ],
    )
    .await?;
    let request_id = |ns: &TestNamespace| {
        ns.kubectl(&["get", "gsp", "gluesync", "-o", "jsonpath={.spec.requestID}"])
    };
    assert_eq!(
        request_id(&ns)?,
        "from-git-1",
        "the value seeds the first install"
    );
    patch_spec(&ns, json!({"requestID": "retry-1"})).await?;
    helm_kit(&ns, &["upgrade", "--reuse-values"], &sim, &[])?;
    assert_eq!(request_id(&ns)?, "retry-1", "the live value is kept");
    // A new version from Git still wins.
    helm_kit(
        &ns,
        &["upgrade", "--reuse-values"],
        &sim,
        &["gluesyncCoreHub.tag=2.3.2.2"],
    )?;
    assert_eq!(spec_version(&ns)?, "2.3.2.2");
    assert_eq!(request_id(&ns)?, "retry-1");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_gitops_a_helm_upgrade_runs_the_update_through_gko() -> anyhow::Result<()> {
    let (ns, sim) = install_kit("helm-gitops", &["operator.updatePolicy=gitops"]).await?;
    let _gko = start_chart_gko(&ns, &[])?;
    wait_settled(&ns).await?;
    let before: u32 = sim.calls().enter.values().sum();

    // The commit: a new Core Hub version in the kit's values.
    helm_kit(
        &ns,
        &["upgrade", "--reuse-values"],
        &sim,
        &["gluesyncCoreHub.tag=2.3.2.2"],
    )?;
    assert_eq!(spec_version(&ns)?, "2.3.2.2", "under gitops the values win");
    // Helm did not roll Core Hub itself: its image is still the old one right after the upgrade.
    let rendered = helm(&ns, &["get", "manifest", "gluesync"])?;
    assert!(
        rendered.contains("molo17/gluesync-core-hub:2.3.2.1"),
        "the release keeps the running image"
    );
    let g = wait_finished(&ns, generation(&ns)?).await?;
    assert_succeeded(&g)?;
    assert_eq!(
        image_of(&ns, "statefulset", CORE_HUB).await?,
        "molo17/gluesync-core-hub:2.3.2.2"
    );
    // GKO ran it: maintenance mode, the Core Hub patch, the stability check.
    let reasons = event_reasons_through(&ns, "UpdateSucceeded").await?;
    for r in [
        "PipelinesPaused",
        "CoreHubPatched",
        "CoreHubUpdated",
        "PipelinesResumed",
    ] {
        assert!(reasons.iter().any(|x| x == r), "{r} in {reasons:?}");
    }
    let after: u32 = sim.calls().enter.values().sum();
    assert!(
        after >= before + 20,
        "the 20 running pipelines were put into maintenance mode"
    );
    assert!(
        sim.in_maintenance()
            .iter()
            .all(|id| id.starts_with("kept-in-maintenance"))
    );
    let managers = ns.kubectl(&[
        "get",
        "statefulset",
        CORE_HUB,
        "--show-managed-fields",
        "-o",
        "jsonpath={range .metadata.managedFields[*]}{.manager}{\"\\n\"}{end}",
    ])?;
    assert!(
        managers.lines().any(|m| m == "gluesync-operator"),
        "{managers}"
    );

    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gko_may_do_only_what_it_uses_and_only_in_its_namespace() -> anyhow::Result<()> {
    let (ns, _sim) = install_kit("helm-rbac", &[]).await?;
    let who = format!("system:serviceaccount:{}:{GKO}", ns.name);
    let inside = ns.kubectl(&["auth", "can-i", "--list", "--as", &who])?;
    let rules: Vec<String> = inside
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let expected = [
        "configmaps [] [] [get list watch create patch delete]",
        "deployments.apps [] [] [get list watch patch]",
        "events.events.k8s.io [] [] [create patch]",
        "gluesyncplatforms.gluesync.molo17.com/status [] [] [patch]",
        "gluesyncplatforms.gluesync.molo17.com [] [] [get list watch patch]",
        // The Lease by name; create cannot be limited to one.
        "leases.coordination.k8s.io [] [gluesync-operator] [get update]",
        "leases.coordination.k8s.io [] [] [create]",
        // Create: the pre-pull pods (the admission policy allows no other).
        "pods [] [] [get list watch create delete]",
        "secrets [] [corehub-credentials] [get]",
        // Disaster recovery (disasterRecovery.enabled, the default): the pair's Secret by name, never
        // created nor deleted (the chart creates it); the Service by name, and create, which cannot be
        // limited to a name.
        "secrets [] [gluesync-disaster-recovery] [get patch]",
        "services [] [gluesync-disaster-recovery] [get patch delete]",
        "services [] [] [create]",
        "statefulsets.apps [] [] [get list watch patch]",
    ];
    for e in expected {
        assert!(rules.iter().any(|r| r == e), "{e} in:\n{inside}");
    }
    // Everything else it may do is what every authenticated user may do (self reviews, discovery).
    for r in &rules {
        let granted_to_all =
            r.starts_with("selfsubject") || r.starts_with("[/") || r.starts_with("[]");
        assert!(
            granted_to_all || expected.contains(&r.as_str()),
            "unexpected: {r}"
        );
    }
    // In another namespace, nothing but what every authenticated user may do.
    let elsewhere = ns
        .cp
        .command("kubectl")
        .args(["auth", "can-i", "--list", "--as", &who, "-n", "default"])
        .output()?;
    let elsewhere = String::from_utf8_lossy(&elsewhere.stdout).into_owned();
    for l in elsewhere.lines().skip(1) {
        assert!(
            l.starts_with("selfsubject") || l.trim_start().starts_with('['),
            "outside its namespace: {l}"
        );
    }
    let (can, _) = ns.kubectl_status(&["auth", "can-i", "get", "secrets", "--as", &who], None)?;
    assert!(!can, "no Secret but those it uses");
    for (verb, what, allowed) in [
        ("get", "secret/gluesync-disaster-recovery", true),
        ("patch", "secret/gluesync-disaster-recovery", true),
        ("delete", "secret/gluesync-disaster-recovery", false),
        ("create", "secrets", false),
        ("delete", "service/gluesync-disaster-recovery", true),
        ("get", "secret/db-password", false),
        ("delete", "secret/corehub-credentials", false),
        ("patch", "service/gluesync-gluesync-core-hub", false),
        ("list", "services", false),
    ] {
        let (can, _) = ns.kubectl_status(&["auth", "can-i", verb, what, "--as", &who], None)?;
        assert_eq!(can, allowed, "{verb} {what}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_keeps_the_record_and_a_reinstall_resumes_what_was_paused() -> anyhow::Result<()>
{
    let (ns, sim) = install_kit("helm-uninstall", &[]).await?;
    let gko = start_chart_gko(&ns, &[])?;
    wait_settled(&ns).await?;
    drop(gko);
    // An update that stops with the pipelines in maintenance mode: GKO stops right after the status write
    // that enters the CoreHub step (the fault point), before Core Hub is touched.
    let mut env_gko = start_chart_gko(&ns, &[("GKO_PAUSE_AFTER_STATUS_WRITE", "CoreHub")])?;
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let asked = generation(&ns)?;
    env_gko
        .gko
        .wait_for_line("fault point hit", Duration::from_secs(60))
        .await?;
    env_gko.gko.kill()?;
    let paused = platforms(&ns)
        .get("gluesync")
        .await?
        .status
        .unwrap_or_default()
        .paused_pipelines;
    assert!(!paused.is_empty(), "the fault landed with pipelines paused");
    assert!(
        !sim.in_maintenance()
            .iter()
            .all(|id| id.starts_with("kept-in-maintenance"))
    );

    helm(&ns, &["uninstall", "gluesync", "--wait"])?;
    // The definition and the record of the install stay; GKO's own objects are gone.
    ns.kubectl(&["get", "crd", "gluesyncplatforms.gluesync.molo17.com"])?;
    let g = platforms(&ns).get("gluesync").await?;
    assert_eq!(g.status.unwrap_or_default().paused_pipelines, paused);
    let (gone, _) = ns.kubectl_status(&["get", "deploy", GKO], None)?;
    assert!(!gone, "GKO's Deployment went with the release");

    // Reinstalled, GKO finds the install as it was and resumes what it had paused.
    helm_kit(&ns, &["install"], &sim, &[])?;
    assert_eq!(spec_version(&ns)?, "2.3.2.2", "the live version is kept");
    let gko = start_chart_gko(&ns, &[])?;
    let g = wait_finished(&ns, asked).await?;
    let status = g.status.unwrap_or_default();
    assert!(
        status.paused_pipelines.is_empty(),
        "{:?}",
        status.paused_pipelines
    );
    assert!(
        sim.in_maintenance()
            .iter()
            .all(|id| id.starts_with("kept-in-maintenance"))
    );
    drop(gko);
    Ok(())
}

// Disaster recovery: a pair set up by hand with the kit's values, and what GKO's chart lets GKO do for a
// setup from the Core Hub UI (docs/disaster-recovery.md).

/// A shared secret for the tests (32 characters and more, no spaces).
const SHARED_SECRET: &str = "dr-test-0123456789abcdef0123456789abcdef";

/// The kit's values of a pair set up by hand: this site is the secondary of `site-a.example.com`.
const BY_HAND: [&str; 4] = [
    "disasterRecovery.enabled=true",
    "disasterRecovery.role=secondary",
    "disasterRecovery.peerAddress=site-a.example.com",
    "disasterRecovery.sharedSecret=dr-test-0123456789abcdef0123456789abcdef",
];

/// `helm template gluesync <chart>` with these `--set` values, without the cluster (`lookup` finds
/// nothing): the objects it renders.
fn template(chart: &str, sets: &[&str]) -> anyhow::Result<Vec<Value>> {
    use serde::Deserialize;
    let mut cmd = gko_test_support::control_plane().command("helm");
    cmd.args(["template", "gluesync", chart]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output()?;
    if !out.status.success() {
        bail!(
            "helm template {chart} {sets:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut objects = vec![];
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc)?;
        if !v.is_null() {
            objects.push(v);
        }
    }
    Ok(objects)
}

/// The object of this kind and name among `objects`.
fn object<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

/// The environment, ports, mounts and volumes of a disaster-recovery setup, and GKO's annotation.
type DrParts = (
    Vec<Value>,
    Vec<Value>,
    Vec<Value>,
    Vec<Value>,
    Option<Value>,
);

/// What a disaster-recovery setup puts on a workload's pod template, as GKO writes it (its managed
/// container is the first): the `GLUESYNC_DR_*` environment, the two ports, the mount, the volume, and
/// GKO's annotation.
fn dr_parts(workload: &Value) -> DrParts {
    let template = &workload["spec"]["template"];
    let container = &template["spec"]["containers"][0];
    let items = |v: &Value, keep: &dyn Fn(&Value) -> bool| -> Vec<Value> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter(|x| keep(x))
            .cloned()
            .collect()
    };
    let env = items(&container["env"], &|e| {
        e["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("GLUESYNC_DR_"))
    });
    let ports = items(&container["ports"], &|p| {
        p["name"] == "dr-replication" || p["name"] == "dr-control"
    });
    let mounts = items(&container["volumeMounts"], &|m| {
        m["name"] == "gluesync-disaster-recovery"
            || m["mountPath"] == "/opt/gluesync/disaster-recovery"
    });
    let volumes = items(&template["spec"]["volumes"], &|v| {
        v["name"] == "gluesync-disaster-recovery"
    });
    let mark = template["metadata"]["annotations"]
        .get("gluesync.molo17.com/disaster-recovery")
        .cloned();
    (env, ports, mounts, volumes, mark)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kit_sets_up_a_disaster_recovery_pair_by_hand_with_gkos_names() -> anyhow::Result<()> {
    let kit = kit()?;
    let mut by_hand: Vec<&str> = BY_HAND.to_vec();
    by_hand.extend([
        "disasterRecovery.service.type=NodePort",
        "disasterRecovery.service.externalTrafficPolicy=Local",
    ]);
    // Installed: the API server accepts everything the kit renders.
    let (ns, _sim) = install_kit("helm-dr-kit", &by_hand).await?;
    let mut lint = vec!["lint", "--strict", kit.as_str()];
    for s in &by_hand {
        lint.extend(["--set", s]);
    }
    helm(&ns, &lint)?;

    // Core Hub and Chronos carry exactly what GKO's setup gives them, with GKO's names.
    let secret = "gluesync-gluesync-disaster-recovery";
    for sts in [CORE_HUB, "gluesync-gluesync-chronos"] {
        let live: Value =
            serde_json::from_str(&ns.kubectl(&["get", "statefulset", sts, "-o", "json"])?)?;
        let (env, ports, mounts, volumes, mark) = dr_parts(&live);
        assert_eq!(
            env,
            [
                json!({"name": "GLUESYNC_DR_ENABLED", "value": "true"}),
                json!({"name": "GLUESYNC_DR_ROLE", "value": "secondary"}),
                json!({"name": "GLUESYNC_DR_PEER_ADDRESS", "value": "site-a.example.com"}),
                json!({"name": "GLUESYNC_DR_REPLICATION_PORT", "value": "1718"}),
                json!({"name": "GLUESYNC_DR_CONTROL_PORT", "value": "1719"}),
                json!({"name": "GLUESYNC_DR_SECRET_FILE", "value": "/opt/gluesync/disaster-recovery/sharedSecret"}),
            ],
            "{sts}"
        );
        assert_eq!(
            ports,
            [
                json!({"name": "dr-replication", "containerPort": 1718, "protocol": "TCP"}),
                json!({"name": "dr-control", "containerPort": 1719, "protocol": "TCP"}),
            ],
            "{sts}"
        );
        assert_eq!(
            mounts,
            [
                json!({"name": "gluesync-disaster-recovery", "mountPath": "/opt/gluesync/disaster-recovery", "readOnly": true})
            ],
            "{sts}"
        );
        assert_eq!(
            volumes,
            [
                json!({"name": "gluesync-disaster-recovery", "secret": {"secretName": secret, "defaultMode": 256}})
            ],
            "{sts}"
        );
        assert_eq!(
            mark, None,
            "{sts}: the annotation that marks GKO's setups is GKO's alone"
        );
        // The container's own port is still there.
        assert_eq!(
            live["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"],
            1717
        );
    }
    // The other modules get none of it.
    for deploy in ["gluesync-gluesync-grafana", "gluesync-gluesync-prometheus"] {
        let live: Value =
            serde_json::from_str(&ns.kubectl(&["get", "deployment", deploy, "-o", "json"])?)?;
        let (env, ports, mounts, volumes, _) = dr_parts(&live);
        assert!(
            env.is_empty() && ports.is_empty() && mounts.is_empty() && volumes.is_empty(),
            "{deploy}: {live}"
        );
    }
    // The Secret holds the shared secret under sharedSecret; it is not GKO's.
    let s: Value = serde_json::from_str(&ns.kubectl(&["get", "secret", secret, "-o", "json"])?)?;
    let encoded = s["data"]["sharedSecret"].as_str().context("sharedSecret")?;
    let decoded = std::process::Command::new("sh")
        .args(["-c", &format!("printf %s '{encoded}' | base64 -d")])
        .output()?;
    assert_eq!(String::from_utf8_lossy(&decoded.stdout), SHARED_SECRET);
    assert_ne!(
        s["metadata"]["labels"]["app.kubernetes.io/managed-by"], "gluesync-operator",
        "the kit's Secret is not GKO's to delete"
    );

    // The Service publishes 1718 and 1719 (TCP) in front of Core Hub's pods, and of those alone.
    let svc: Value = serde_json::from_str(&ns.kubectl(&["get", "service", secret, "-o", "json"])?)?;
    assert_eq!(svc["spec"]["type"], "NodePort");
    assert_eq!(svc["spec"]["externalTrafficPolicy"], "Local");
    let ports: Vec<Value> = svc["spec"]["ports"]
        .as_array()
        .context("ports")?
        .iter()
        .map(|p| {
            json!({"name": p["name"], "port": p["port"], "targetPort": p["targetPort"], "protocol": p["protocol"]})
        })
        .collect();
    assert_eq!(
        ports,
        [
            json!({"name": "dr-replication", "port": 1718, "targetPort": 1718, "protocol": "TCP"}),
            json!({"name": "dr-control", "port": 1719, "targetPort": 1719, "protocol": "TCP"}),
        ]
    );
    let core: Value =
        serde_json::from_str(&ns.kubectl(&["get", "statefulset", CORE_HUB, "-o", "json"])?)?;
    assert_eq!(
        svc["spec"]["selector"], core["spec"]["selector"]["matchLabels"],
        "the Service selects Core Hub's pods"
    );
    let selector = svc["spec"]["selector"]
        .as_object()
        .context("selector")?
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join(",");
    let pods = gko_test_support::eventually("Core Hub's pod", Duration::from_secs(60), || async {
        let names = ns.kubectl(&["get", "pods", "-l", &selector, "-o", "name"])?;
        Ok((!names.trim().is_empty()).then_some(names))
    })
    .await?;
    assert_eq!(
        pods.trim(),
        format!("pod/{CORE_HUB}-0"),
        "Core Hub's pods alone"
    );

    // Never both ways: with a setup made through GKO in place, the kit refuses to render the by-hand one.
    ns.kubectl(&[
        "patch",
        "gsp",
        "gluesync",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"disasterRecovery":{"role":"primary","peerAddress":"site-b.example.com"}}}"#,
    ])?;
    let sim = simulator().await?;
    let refused = helm_kit(&ns, &["upgrade", "--reuse-values"], &sim, &[])
        .unwrap_err()
        .to_string();
    assert!(refused.contains("made through GKO"), "{refused}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kit_renders_no_disaster_recovery_unless_enabled() -> anyhow::Result<()> {
    let kit = kit()?;
    let off = template(&kit, &[])?;
    let on = template(&kit, &BY_HAND)?;
    for (objects, enabled) in [(&off, false), (&on, true)] {
        for sts in [CORE_HUB, "gluesync-gluesync-chronos"] {
            let w = object(objects, "StatefulSet", sts).context(sts)?;
            let (env, ports, mounts, volumes, mark) = dr_parts(w);
            assert_eq!(env.len(), if enabled { 6 } else { 0 }, "{sts} {env:?}");
            assert_eq!(ports.len(), if enabled { 2 } else { 0 }, "{sts} {ports:?}");
            assert_eq!(mounts.len(), usize::from(enabled), "{sts}");
            assert_eq!(volumes.len(), usize::from(enabled), "{sts}");
            assert_eq!(mark, None);
        }
        for kind in ["Secret", "Service"] {
            assert_eq!(
                object(objects, kind, "gluesync-gluesync-disaster-recovery").is_some(),
                enabled,
                "{kind}"
            );
        }
    }
    // A Secret of the user's: mounted, and none rendered.
    let mut existing: Vec<&str> = BY_HAND[..3].to_vec();
    existing.push("disasterRecovery.existingSecret=gluesync-dr-pair");
    let objects = template(&kit, &existing)?;
    assert!(object(&objects, "Secret", "gluesync-gluesync-disaster-recovery").is_none());
    let (.., volumes, _) = dr_parts(object(&objects, "StatefulSet", CORE_HUB).context("core hub")?);
    assert_eq!(volumes[0]["secret"]["secretName"], "gluesync-dr-pair");
    // Values GKO would refuse are refused, and so is GKO's own Secret.
    for (bad, says) in [
        ("disasterRecovery.role=tertiary", "disasterRecovery.role"),
        (
            "disasterRecovery.peerAddress=",
            "disasterRecovery.peerAddress",
        ),
        ("disasterRecovery.sharedSecret=short", "sharedSecret"),
        ("disasterRecovery.controlPort=1718", "must differ"),
        (
            "disasterRecovery.existingSecret=gluesync-dr-pair",
            "not both",
        ),
    ] {
        let mut sets = BY_HAND.to_vec();
        sets.push(bad);
        let err = template(&kit, &sets).unwrap_err().to_string();
        assert!(err.contains(says), "{bad}: {err}");
    }
    let mut gkos: Vec<&str> = BY_HAND[..3].to_vec();
    gkos.push("disasterRecovery.existingSecret=gluesync-disaster-recovery");
    let err = template(&kit, &gkos).unwrap_err().to_string();
    assert!(err.contains("GKO's setup"), "{err}");
    // Never both ways: a pair declared for GKO and one set up by hand exclude each other.
    let mut both = BY_HAND.to_vec();
    both.extend([
        "operator.platform.disasterRecovery.role=primary",
        "operator.platform.disasterRecovery.peerAddress=site-b.example.com",
    ]);
    let err = template(&kit, &both).unwrap_err().to_string();
    assert!(err.contains("exclude each other"), "{err}");
    Ok(())
}

/// The Role's rules on `resource`, as (resourceNames, verbs).
fn rules_on(objects: &[Value], resource: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(String::from))
            .collect()
    };
    objects
        .iter()
        .filter(|o| o["kind"] == "Role")
        .flat_map(|role| role["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| {
            r["apiGroups"] == json!([""]) && strings(&r["resources"]).iter().any(|x| x == resource)
        })
        .map(|r| (strings(&r["resourceNames"]), strings(&r["verbs"])))
        .collect()
}

/// GKO's `GKO_ALLOWED_SECRETS`, as its Deployment sets it.
fn allowed_secrets(objects: &[Value]) -> anyhow::Result<Vec<String>> {
    let deploy = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .context("GKO's Deployment")?;
    let env = deploy["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .context("env")?;
    let value = env
        .iter()
        .find(|e| e["name"] == "GKO_ALLOWED_SECRETS")
        .and_then(|e| e["value"].as_str())
        .context("GKO_ALLOWED_SECRETS")?;
    Ok(value
        .split(',')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_chart_grants_the_disaster_recovery_secret_and_service_by_name()
-> anyhow::Result<()> {
    let operator = charts().join("gluesync-operator").display().to_string();
    let names = |v: &[&str]| -> Vec<String> { v.iter().map(|s| s.to_string()).collect() };
    let dr = names(&["gluesync-disaster-recovery"]);
    let by_name = names(&["get", "patch", "delete"]);

    // disasterRecovery.enabled, the default: the pair's Secret by name to get and patch, never to create
    // or delete (the chart creates it, empty and Opaque); the Service by name, and create.
    let on = template(&operator, &["platform.version=2.3.2.1"])?;
    let secrets = rules_on(&on, "secrets");
    assert!(
        secrets.contains(&(dr.clone(), names(&["get", "patch"]))),
        "{secrets:?}"
    );
    assert!(
        secrets
            .iter()
            .all(|(n, v)| !n.is_empty() && !v.iter().any(|v| v == "create" || v == "delete")),
        "no create and no delete on any Secret: {secrets:?}"
    );
    let made = object(&on, "Secret", "gluesync-disaster-recovery").context("the pair's Secret")?;
    assert_eq!(made["type"], "Opaque");
    assert!(made.get("data").is_none() && made.get("stringData").is_none());
    assert_eq!(
        made["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    let services = rules_on(&on, "services");
    assert!(
        services.contains(&(dr.clone(), by_name.clone())),
        "{services:?}"
    );
    assert!(
        services.contains(&(vec![], names(&["create"]))),
        "{services:?}"
    );
    for (resource_names, verbs) in &services {
        assert!(
            !resource_names.is_empty() || verbs == &names(&["create"]),
            "services: {services:?}"
        );
    }
    assert_eq!(
        rules_on(&on, "secrets")
            .into_iter()
            .find(|(_, v)| v == &names(&["get"])),
        Some((names(&["corehub-credentials"]), names(&["get"])))
    );
    assert_eq!(
        allowed_secrets(&on)?,
        names(&["corehub-credentials", "gluesync-disaster-recovery"])
    );

    // A Secret of the user's for a pair kept in Git: allowed, and read only.
    let own = template(
        &operator,
        &[
            "platform.version=2.3.2.1",
            "platform.updatePolicy=gitops",
            "platform.disasterRecovery.role=primary",
            "platform.disasterRecovery.peerAddress=site-b.example.com",
            "platform.disasterRecovery.secretName=gluesync-dr-pair",
        ],
    )?;
    assert!(rules_on(&own, "secrets").contains(&(
        names(&["corehub-credentials", "gluesync-dr-pair"]),
        names(&["get"])
    )));
    assert!(rules_on(&own, "secrets").contains(&(dr.clone(), names(&["get", "patch"]))));
    assert_eq!(
        allowed_secrets(&own)?,
        names(&[
            "corehub-credentials",
            "gluesync-disaster-recovery",
            "gluesync-dr-pair"
        ])
    );
    let gsp = own
        .iter()
        .find(|o| o["kind"] == "GluesyncPlatform")
        .context("the platform")?;
    assert_eq!(
        gsp["spec"]["disasterRecovery"],
        json!({
            "role": "primary",
            "peerAddress": "site-b.example.com",
            "secretName": "gluesync-dr-pair",
            // The defaults the API server would fill in, so that what Git renders is what runs.
            "replicationPort": 1718,
            "controlPort": 1719,
            "service": {"type": "LoadBalancer"},
        })
    );

    // disasterRecovery.enabled=false: no rule on Services, Secrets by name for get only, nothing allowed.
    let off = template(
        &operator,
        &["platform.version=2.3.2.1", "disasterRecovery.enabled=false"],
    )?;
    assert_eq!(rules_on(&off, "services"), vec![]);
    assert!(object(&off, "Secret", "gluesync-disaster-recovery").is_none());
    assert_eq!(
        rules_on(&off, "secrets"),
        vec![(names(&["corehub-credentials"]), names(&["get"]))]
    );
    assert_eq!(allowed_secrets(&off)?, names(&["corehub-credentials"]));
    assert!(
        on.iter()
            .chain(&off)
            .filter(|o| o["kind"] == "GluesyncPlatform")
            .all(|g| g["spec"].get("disasterRecovery").is_none()),
        "no pair unless asked for"
    );
    // A pair in the values without the permission is refused.
    let err = template(
        &operator,
        &[
            "platform.version=2.3.2.1",
            "disasterRecovery.enabled=false",
            "platform.disasterRecovery.role=primary",
            "platform.disasterRecovery.peerAddress=site-b.example.com",
        ],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("disasterRecovery.enabled"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_upgrade_keeps_the_pair_the_ui_set_and_gitops_takes_the_values() -> anyhow::Result<()>
{
    let ns = namespace("helm-dr-platform").await?;
    let operator = charts().join("gluesync-operator").display().to_string();
    let dr = |ns: &TestNamespace| -> anyhow::Result<Value> {
        let text = ns.kubectl(&[
            "get",
            "gsp",
            "gluesync",
            "-o",
            "jsonpath={.spec.disasterRecovery}",
        ])?;
        Ok(if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text)?
        })
    };
    let run = |verb: &str, extra: &[&str]| -> anyhow::Result<String> {
        let mut args = vec![verb, "gluesync-operator", operator.as_str()];
        for s in [
            "crds.install=false",
            "platform.version=2.3.2.1",
            "platform.disasterRecovery.role=primary",
            "platform.disasterRecovery.peerAddress=site-b.example.com",
        ]
        .iter()
        .chain(extra)
        {
            args.extend(["--set", s]);
        }
        helm(&ns, &args)
    };
    let from_values = json!({
        "role": "primary",
        "peerAddress": "site-b.example.com",
        "replicationPort": 1718,
        "controlPort": 1719,
        "service": {"type": "LoadBalancer"},
    });
    // The first install: the values seed the pair.
    run("install", &[])?;
    assert_eq!(dr(&ns)?, from_values);

    // Under ui the Core Hub UI sets the pair up again (GKO writes spec.disasterRecovery), and helm
    // upgrade keeps it.
    let from_ui =
        json!({"role": "secondary", "peerAddress": "site-a.example.com", "revision": "ui-1"});
    ns.kubectl(&[
        "patch",
        "gsp",
        "gluesync",
        "--type",
        "json",
        "-p",
        &json!([{"op": "add", "path": "/spec/disasterRecovery", "value": from_ui}]).to_string(),
    ])?;
    let live = dr(&ns)?;
    assert_eq!(live["role"], "secondary");
    let settled = generation(&ns)?;
    run("upgrade", &[])?;
    assert_eq!(dr(&ns)?, live, "under ui the live pair wins");
    assert_eq!(
        generation(&ns)?,
        settled,
        "the upgrade changed nothing of the spec"
    );
    assert!(helm(&ns, &["get", "manifest", "gluesync-operator"])?.contains("revision: ui-1"));

    // Taken down from the UI: helm upgrade does not bring the values' pair back.
    ns.kubectl(&[
        "patch",
        "gsp",
        "gluesync",
        "--type",
        "json",
        "-p",
        r#"[{"op": "remove", "path": "/spec/disasterRecovery"}]"#,
    ])?;
    run("upgrade", &[])?;
    assert_eq!(dr(&ns)?, Value::Null, "under ui the live absence wins");

    // Under gitops the values win.
    run("upgrade", &["platform.updatePolicy=gitops"])?;
    assert_eq!(dr(&ns)?, from_values, "under gitops the values win");
    Ok(())
}

/// Every value set a platform team uses renders what the API server accepts (a server-side dry run in the
/// test's namespace), and each option renders what it says: the defaults, every option on, gitops,
/// self-update off, disaster recovery on. The Prometheus Operator's kinds (ServiceMonitor, PrometheusRule)
/// are dry-run against that operator's own CRDs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_value_set_renders_what_the_api_server_accepts() -> anyhow::Result<()> {
    let ns = namespace("helm-values").await?;
    monitoring_crds(&ns)?;
    let operator = charts().join("gluesync-operator").display().to_string();
    let digest = format!("sha256:{}", "a".repeat(64));
    let all_on: Vec<String> = [
        "replicas=3",
        "revisionHistoryLimit=3",
        "podDisruptionBudget.enabled=true",
        "topologySpreadConstraints[0].maxSkew=1",
        "topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
        "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
        "topologySpreadConstraints[0].labelSelector.matchLabels.app\\.kubernetes\\.io/name=gluesync-operator",
        "startupProbe.failureThreshold=60",
        "readinessProbe.periodSeconds=7",
        "livenessProbe.timeoutSeconds=3",
        "prometheus.servicemonitor.enabled=true",
        "prometheus.servicemonitor.labels.release=kube-prometheus",
        "prometheus.rules.enabled=true",
        "prometheus.rules.labels.release=kube-prometheus",
        "grafana.dashboard.enabled=true",
        "grafana.dashboard.annotations.grafana_folder=Gluesync",
        "networkPolicy.enabled=true",
        "networkPolicy.ingressFrom[0].namespaceSelector.matchLabels.team=platform",
        "serviceAccount.name=gko",
        "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/gko",
        "extraArgs[0]=--help-not-used",
        "envFrom[0].configMapRef.name=gko-proxy",
        "extraVolumes[0].name=scratch",
        "extraVolumes[0].emptyDir.medium=Memory",
        "extraVolumeMounts[0].name=scratch",
        "extraVolumeMounts[0].mountPath=/scratch",
        "deploymentAnnotations.team=data",
        "conductor.service.annotations.team=data",
        "global.commonLabels.team=data",
        "global.imageRegistry=registry.example.com",
        "global.imagePullSecrets[0].name=regcred",
    ]
    .into_iter()
    .map(String::from)
    .chain([format!("image.digest={digest}")])
    .collect();
    let sets: [(&str, Vec<String>); 8] = [
        ("defaults", vec![]),
        ("every option on", all_on),
        (
            "a PodMonitor",
            vec!["prometheus.podmonitor.enabled=true".into()],
        ),
        ("gitops", vec!["platform.updatePolicy=gitops".into()]),
        ("self-update off", vec!["selfUpdate.enabled=false".into()]),
        (
            "disaster recovery on",
            vec![
                "platform.disasterRecovery.role=primary".into(),
                "platform.disasterRecovery.peerAddress=dr.example.com".into(),
            ],
        ),
        ("the definition not kept", vec!["crds.keep=false".into()]),
        ("the definition left out", vec!["crds.install=false".into()]),
    ];
    for (what, values) in &sets {
        let mut args = vec![
            "template".to_string(),
            "gluesync".into(),
            operator.clone(),
            "--set".into(),
            "platform.version=2.3.2.1".into(),
        ];
        for v in values {
            args.extend(["--set".into(), v.clone()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let rendered = helm(&ns, &args)?;
        let (ok, out) = dry_run(&ns, &rendered)?;
        assert!(
            ok,
            "{what}: the API server refuses what the chart renders: {out}"
        );
    }
    // What the options render.
    let mut on = vec!["platform.version=2.3.2.1"];
    on.extend(sets[1].1.iter().map(String::as_str));
    let objects = template(&operator, &on)?;
    let deployment = object(&objects, "Deployment", GKO).unwrap();
    let pod = &deployment["spec"]["template"];
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(deployment["spec"]["revisionHistoryLimit"], 3);
    assert_eq!(deployment["metadata"]["annotations"]["team"], "data");
    assert_eq!(pod["metadata"]["labels"]["team"], "data");
    let container = &pod["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        format!("registry.example.com/molo17/gluesync-operator@{digest}")
    );
    assert_eq!(container["args"], json!(["run", "--help-not-used"]));
    assert_eq!(container["envFrom"][0]["configMapRef"]["name"], "gko-proxy");
    assert_eq!(container["startupProbe"]["failureThreshold"], 60);
    assert_eq!(container["readinessProbe"]["periodSeconds"], 7);
    assert_eq!(container["livenessProbe"]["timeoutSeconds"], 3);
    assert!(
        container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["mountPath"] == "/scratch")
    );
    assert_eq!(pod["spec"]["serviceAccountName"], "gko");
    assert_eq!(pod["spec"]["imagePullSecrets"][0]["name"], "regcred");
    assert_eq!(
        pod["spec"]["topologySpreadConstraints"][0]["topologyKey"],
        "kubernetes.io/hostname"
    );
    // With a ServiceMonitor, no scrape annotations.
    assert!(pod["metadata"]["annotations"]["prometheus.io/scrape"].is_null());
    let pdb = object(&objects, "PodDisruptionBudget", GKO).unwrap();
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    let sa = object(&objects, "ServiceAccount", "gko").unwrap();
    assert_eq!(
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::1:role/gko"
    );
    let binding = object(&objects, "RoleBinding", GKO).unwrap();
    assert_eq!(binding["subjects"][0]["name"], "gko");
    let rule = object(&objects, "PrometheusRule", GKO).unwrap();
    assert_eq!(rule["metadata"]["labels"]["release"], "kube-prometheus");
    let dashboard = object(&objects, "ConfigMap", &format!("{GKO}-dashboard")).unwrap();
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(
        dashboard["metadata"]["annotations"]["grafana_folder"],
        "Gluesync"
    );
    let monitor = object(&objects, "ServiceMonitor", GKO).unwrap();
    assert_eq!(monitor["metadata"]["labels"]["release"], "kube-prometheus");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    let metrics = object(&objects, "Service", &format!("{GKO}-metrics")).unwrap();
    assert_eq!(metrics["spec"]["ports"][0]["name"], "metrics");
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"],
        metrics["metadata"]["labels"]["app.kubernetes.io/component"]
    );
    let policy = object(&objects, "NetworkPolicy", GKO).unwrap();
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]["team"],
        "platform"
    );
    // The defaults: scrape annotations on the pod, no monitor, no PDB, no NetworkPolicy.
    let defaults = template(&operator, &["platform.version=2.3.2.1"])?;
    let pod = &object(&defaults, "Deployment", GKO).unwrap()["spec"]["template"];
    assert_eq!(
        pod["metadata"]["annotations"]["prometheus.io/scrape"],
        "true"
    );
    for kind in [
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "PodDisruptionBudget",
        "NetworkPolicy",
    ] {
        assert!(
            !defaults.iter().any(|o| o["kind"] == kind),
            "{kind} rendered by default"
        );
    }
    // The definition: rendered and kept by default, not kept with crds.keep=false, not rendered with
    // crds.install=false (tests/cluster/crds.rs installs and upgrades it with helm).
    let crd = "gluesyncplatforms.gluesync.molo17.com";
    let policy = |objects: &[Value]| {
        object(objects, "CustomResourceDefinition", crd)
            .map(|o| o["metadata"]["annotations"]["helm.sh/resource-policy"].clone())
    };
    assert_eq!(policy(&defaults), Some(json!("keep")));
    let not_kept = template(&operator, &["platform.version=2.3.2.1", "crds.keep=false"])?;
    assert_eq!(policy(&not_kept), Some(Value::Null));
    let left = template(
        &operator,
        &["platform.version=2.3.2.1", "crds.install=false"],
    )?;
    assert_eq!(policy(&left), None);
    // A replica count above 2 is allowed; a wrong digest is not.
    let refused = refusal(
        &ns,
        &operator,
        &["platform.version=2.3.2.1", "image.digest=latest"],
    );
    assert!(refused.contains("/image/digest"), "{refused}");
    Ok(())
}

/// A Prometheus duration of the chart's schema (`1m30s`) in milliseconds.
fn duration_ms(d: &str) -> u64 {
    let mut total = 0;
    let mut number = String::new();
    let mut chars = d.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let n: u64 = std::mem::take(&mut number).parse().unwrap();
        total += n * match (c, chars.peek()) {
            ('m', Some('s')) => {
                chars.next();
                1
            }
            ('s', _) => 1_000,
            ('m', _) => 60_000,
            ('h', _) => 3_600_000,
            _ => panic!("not a duration: {d}"),
        };
    }
    total
}

/// GKO's monitors time out within their interval (the Prometheus Operator refuses a longer timeout, and
/// GKO would go unscraped): unset, 30 s or the interval when shorter; set longer, the chart refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitors_time_out_within_their_interval() -> anyhow::Result<()> {
    let ns = namespace("helm-scrape").await?;
    monitoring_crds(&ns)?;
    let operator = charts().join("gluesync-operator").display().to_string();
    for (kind, key, endpoints) in [
        ("ServiceMonitor", "prometheus.servicemonitor", "endpoints"),
        ("PodMonitor", "prometheus.podmonitor", "podMetricsEndpoints"),
    ] {
        for (interval, timeout, want) in [
            ("15s", None, "15s"),
            ("60s", None, "30s"),
            ("10m", None, "30s"),
            ("500ms", None, "500ms"),
            ("1m30s", Some("45s"), "45s"),
            ("20s", Some("20s"), "20s"),
        ] {
            let mut sets = vec![
                "platform.version=2.3.2.1".to_string(),
                format!("{key}.enabled=true"),
                format!("{key}.interval={interval}"),
            ];
            if let Some(t) = timeout {
                sets.push(format!("{key}.scrapeTimeout={t}"));
            }
            let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
            let objects = template(&operator, &sets)?;
            let monitor = object(&objects, kind, GKO).context("the monitor")?;
            let endpoint = &monitor["spec"][endpoints][0];
            assert_eq!(endpoint["interval"], interval, "{kind}");
            assert_eq!(endpoint["scrapeTimeout"], want, "{kind} every {interval}");
            assert!(duration_ms(want) <= duration_ms(interval), "{kind} {want}");
            // And the API server takes it, as the Prometheus Operator's schema says.
            let mut args = vec!["template", "gluesync", operator.as_str()];
            for s in &sets {
                args.extend(["--set", s]);
            }
            let (ok, out) = dry_run(&ns, &helm(&ns, &args)?)?;
            assert!(ok, "{kind} every {interval}: {out}");
        }
        let refused = refusal(
            &ns,
            &operator,
            &[
                "platform.version=2.3.2.1",
                &format!("{key}.enabled=true"),
                &format!("{key}.interval=15s"),
                &format!("{key}.scrapeTimeout=30s"),
            ],
        );
        assert!(
            refused.contains(&format!(
                "{key}.scrapeTimeout (30s) is longer than {key}.interval (15s)"
            )),
            "{refused}"
        );
        // Not a duration: the schema says so.
        let refused = refusal(
            &ns,
            &operator,
            &[
                "platform.version=2.3.2.1",
                &format!("{key}.scrapeTimeout=soon"),
            ],
        );
        assert!(refused.contains("scrapeTimeout"), "{refused}");
    }
    assert_eq!(duration_ms("1m30s"), 90_000);
    assert_eq!(duration_ms("1h500ms"), 3_600_500);
    Ok(())
}

/// GKO's PodDisruptionBudget lets a node drain through: with one replica (the default) the eviction of
/// GKO's pod is allowed, on the control plane's own disruption controller, where the budget the chart
/// rendered before (`minAvailable: 1`) refuses it for ever; with more replicas, one may go at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_drain_may_evict_gkos_one_pod() -> anyhow::Result<()> {
    use k8s_openapi::api::{core::v1::Pod, policy::v1::PodDisruptionBudget};
    use kube::{
        ResourceExt,
        api::{Api, EvictParams},
    };
    let ns = namespace("helm-drain").await?;
    let operator = charts().join("gluesync-operator").display().to_string();
    let budget = |extra: &[&str]| -> anyhow::Result<Value> {
        let mut sets = vec![
            "platform.version=2.3.2.1",
            "podDisruptionBudget.enabled=true",
        ];
        sets.extend(extra);
        let objects = template(&operator, &sets)?;
        Ok(object(&objects, "PodDisruptionBudget", GKO)
            .context("the budget")?
            .clone())
    };
    let one = budget(&[])?;
    assert_eq!(one["spec"]["maxUnavailable"], 1, "{one}");
    assert!(one["spec"]["minAvailable"].is_null(), "{one}");
    assert_eq!(one["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    let three = budget(&["replicas=3"])?;
    assert_eq!(three["spec"]["minAvailable"], 1, "{three}");
    assert!(three["spec"]["maxUnavailable"].is_null(), "{three}");
    assert_eq!(three["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    // Set by hand, the values count.
    let set = budget(&["podDisruptionBudget.maxUnavailable=50%"])?;
    assert_eq!(set["spec"]["maxUnavailable"], "50%");

    // A refused eviction (429) said at once, as kubectl drain reads it.
    let pods: Api<Pod> = Api::namespaced(ns.cp.client_without_retry().await?, &ns.name);
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(ns.client.clone(), &ns.name);
    // GKO's one pod, of a Deployment labelled as the chart's (the disruption controller counts the pods
    // a budget expects from their controller's replicas), ready on the simulated node.
    ns.apply(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: gko\nspec:\n  replicas: 1\n  \
         selector:\n    matchLabels: &labels\n      app.kubernetes.io/name: gluesync-operator\n      \
         app.kubernetes.io/instance: gluesync\n  template:\n    metadata:\n      labels: *labels\n    \
         spec:\n      containers:\n        - name: gluesync-operator\n          \
         image: molo17/gluesync-operator:0.3.0\n",
    )?;
    // A budget, once the disruption controller has counted GKO's one pod under it; then the eviction a
    // drain asks for.
    let evict = |budget: Value| {
        let ns = &ns;
        let pods = pods.clone();
        let budgets = budgets.clone();
        async move {
            ns.apply(&serde_json::to_string(&budget)?)?;
            gko_test_support::eventually(
                "the disruption controller to count GKO's pod",
                Duration::from_secs(60),
                || async {
                    let b = budgets.get(GKO).await?;
                    let generation = b.metadata.generation;
                    Ok(b.status.filter(|s| {
                        s.observed_generation == generation
                            && s.expected_pods == Some(1)
                            && s.current_healthy == Some(1)
                    }))
                },
            )
            .await?;
            let pod = pods
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .find(|p| p.metadata.deletion_timestamp.is_none())
                .context("GKO's pod")?
                .name_any();
            anyhow::Ok((pod.clone(), pods.evict(&pod, &EvictParams::default()).await))
        }
    };
    // The budget of before: the eviction is refused (429), the pod stays.
    let before = budget(&["podDisruptionBudget.minAvailable=1"])?;
    assert_eq!(before["spec"]["minAvailable"], 1);
    let (pod, refused) = evict(before).await?;
    match refused {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 429, "{s:?}");
            assert!(s.message.contains("disruption budget"), "{}", s.message);
        }
        other => panic!("the budget of before let the eviction through: {other:?}"),
    }
    let stayed = pods.get(&pod).await?;
    assert!(stayed.metadata.deletion_timestamp.is_none(), "{pod}");
    // Today's, one replica: the eviction goes through.
    budgets.delete(GKO, &Default::default()).await?;
    let (pod, evicted) = evict(one).await?;
    assert!(evicted.is_ok(), "{evicted:?}");
    let gone = pods.get_opt(&pod).await?;
    assert!(
        gone.is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "{pod} was not evicted"
    );
    Ok(())
}
