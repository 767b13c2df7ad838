//! Flux's health checks, Helm 4's `--wait` and kpt read the GluesyncPlatform through kstatus. Here the
//! kstatus library itself (`hack/kstatus`, built by `hack/controlplane.sh build`) reads the live
//! resource at the moments that matter: installed and ready (Current), the spec changed and not yet seen
//! by GKO (InProgress), an update running (InProgress), the update done (Current), a failed update rolled
//! back (Failed). Each moment is first shown to be the moment it claims (the generations, the step, the
//! last attempt), and at each `kubectl wait --for=condition=Ready` agrees: Current exactly when Ready is
//! True for the current generation. Every version of the resource a watch sees through the update is
//! read too, each against the status contract and what GKO says it is doing, and by Argo CD's health
//! check (deploy/argocd/health.lua), which must say Healthy, Progressing and Degraded where kstatus says
//! Current, InProgress and Failed.

use crate::argocd;
use crate::common;

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context as _, bail};
use common::*;
use gko_test_support::TestNamespace;
use gluesync_operator::api::{GluesyncPlatform, Phase, UpdateResult, UpdateStep};
use serde_json::{Value, json};

/// kstatus's reading of one resource.
#[derive(Debug, Clone, PartialEq)]
struct Reading {
    status: String,
    message: String,
}

/// The kstatus program that `hack/controlplane.sh build` puts in its cache.
fn kstatus_exe(ns: &TestNamespace) -> anyhow::Result<PathBuf> {
    let script = ns.cp.repo_root.join("hack/controlplane.sh");
    let out = Command::new("bash").arg(&script).arg("kstatus").output()?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || !path.is_file() {
        bail!(
            "the kstatus program is not built (looked for {}{}): run hack/controlplane.sh build",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(path)
}

/// kstatus's readings of resources given as JSON, one per resource, in order.
fn kstatus(exe: &Path, resources: &[Value]) -> anyhow::Result<Vec<Reading>> {
    let mut child = Command::new(exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", exe.display()))?;
    let mut stdin = child.stdin.take().context("kstatus's standard input")?;
    for r in resources {
        serde_json::to_writer(&mut stdin, r)?;
        stdin.write_all(b"\n")?;
    }
    drop(stdin);
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("kstatus: {}", String::from_utf8_lossy(&out.stderr));
    }
    let readings = String::from_utf8(out.stdout)?
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line)?;
            Ok(Reading {
                status: v["status"].as_str().unwrap_or_default().to_string(),
                message: v["message"].as_str().unwrap_or_default().to_string(),
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if readings.len() != resources.len() {
        bail!(
            "kstatus read {} resources and gave {} readings",
            resources.len(),
            readings.len()
        );
    }
    Ok(readings)
}

/// The GluesyncPlatform as the API server returns it.
fn live(ns: &TestNamespace) -> anyhow::Result<Value> {
    Ok(serde_json::from_str(
        &ns.kubectl(&["get", "gsp", "gluesync", "-o", "json"])?,
    )?)
}

fn typed(v: &Value) -> anyhow::Result<GluesyncPlatform> {
    Ok(serde_json::from_value(v.clone())?)
}

/// `kubectl wait --for=condition=Ready`, checked once.
fn kubectl_wait_ready(ns: &TestNamespace) -> anyhow::Result<bool> {
    let (ok, out) = ns.kubectl_status(
        &[
            "wait",
            "gsp/gluesync",
            "--for=condition=Ready",
            "--timeout=0s",
        ],
        None,
    )?;
    // Anything but the condition not being met (an unknown resource, a refused call) is a failure here.
    if !ok && !out.contains("condition not met") {
        bail!("kubectl wait: {out}");
    }
    Ok(ok)
}

/// One moment, read live: the resource, kstatus's reading of it, and `kubectl wait`'s answer. `is_moment`
/// must hold before and after both reads, so they read the moment it claims; kstatus and `kubectl wait`
/// must agree (Current exactly when the Ready condition is met).
fn read_moment(
    ns: &TestNamespace,
    exe: &Path,
    moment: &str,
    is_moment: impl Fn(&GluesyncPlatform) -> bool,
) -> anyhow::Result<(Reading, GluesyncPlatform)> {
    let before = live(ns)?;
    let g = typed(&before)?;
    assert!(
        is_moment(&g),
        "{moment}: the resource is not at that moment: {:#}",
        before["status"]
    );
    let reading = kstatus(exe, std::slice::from_ref(&before))?.remove(0);
    let ready = kubectl_wait_ready(ns)?;
    assert!(
        is_moment(&typed(&live(ns)?)?),
        "{moment}: the moment passed while it was read"
    );
    println!(
        "{moment}: kstatus {} ({:?}); kubectl wait --for=condition=Ready: {}",
        reading.status,
        reading.message,
        if ready { "met" } else { "not met" }
    );
    assert_eq!(
        reading.status == "Current",
        ready,
        "{moment}: kstatus says {reading:?}, kubectl wait says Ready is {}met",
        if ready { "" } else { "not " }
    );
    Ok((reading, g))
}

/// The generation of the spec and the one the status describes.
fn generations(g: &GluesyncPlatform) -> (i64, Option<i64>) {
    (
        g.metadata.generation.unwrap_or(0),
        g.status.as_ref().and_then(|s| s.observed_generation),
    )
}

fn condition<'a>(
    g: &'a GluesyncPlatform,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    g.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

fn is_true(g: &GluesyncPlatform, type_: &str) -> bool {
    condition(g, type_).is_some_and(|c| c.status == "True")
}

/// GKO reports the install ready for the spec it has now.
async fn wait_ready(ns: &TestNamespace) -> anyhow::Result<GluesyncPlatform> {
    wait_for_platform(ns, "Ready=True at the current generation", |g| {
        let (generation, observed) = generations(g);
        observed == Some(generation) && is_true(g, "Ready")
    })
    .await
}

/// Every version of the GluesyncPlatform a watch sees, as the API server sends it, in order.
fn trace(ns: &TestNamespace) -> Arc<Mutex<Vec<Value>>> {
    use futures::StreamExt;
    use kube::{
        Api,
        api::{ApiResource, DynamicObject},
        runtime::watcher,
    };
    let out = Arc::new(Mutex::new(Vec::new()));
    let sink = out.clone();
    let resource = ApiResource::erase::<GluesyncPlatform>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(ns.client.clone(), &ns.name, &resource);
    tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = stream.next().await {
            let (watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = event else {
                continue;
            };
            if let (Ok(v), Ok(mut seen)) = (serde_json::to_value(&o), sink.lock()) {
                seen.push(v);
            }
        }
    });
    out
}

/// Waits until the trace holds the version the watch began with.
async fn trace_started(versions: &Arc<Mutex<Vec<Value>>>) -> anyhow::Result<()> {
    gko_test_support::eventually("the watch to start", Duration::from_secs(30), || async {
        Ok(versions.lock().is_ok_and(|v| !v.is_empty()).then_some(()))
    })
    .await
}

/// What the resource should read as, from GKO's own account in its status rather than from the
/// conditions kstatus reads: InProgress while the spec is not yet seen or an update runs, Failed once an
/// update of this generation failed, Current when the install runs the spec and every component is ready.
fn gko_account(g: &GluesyncPlatform) -> &'static str {
    let (generation, observed) = generations(g);
    let Some(status) = g.status.as_ref() else {
        return "no status yet";
    };
    if observed != Some(generation) || status.update.is_some() {
        return "InProgress";
    }
    let failed_here = status
        .last_attempt
        .as_ref()
        .is_some_and(|a| a.generation == Some(generation) && a.result == UpdateResult::Failed);
    if failed_here && status.phase == Some(Phase::Failed) {
        return "Failed";
    }
    let all_ready = !status.components.is_empty() && status.components.iter().all(|c| c.ready);
    if matches!(status.phase, Some(Phase::Current | Phase::UpdateAvailable)) && all_ready {
        "Current"
    } else {
        "InProgress"
    }
}

/// `kubectl wait --for=condition=Ready`'s rule on one version of the resource: Ready is True and its
/// observedGeneration (else the status's) is not behind the generation.
fn ready_met(g: &GluesyncPlatform) -> bool {
    let (generation, observed) = generations(g);
    condition(g, "Ready").is_some_and(|c| {
        c.status == "True"
            && c.observed_generation
                .or(observed)
                .is_none_or(|o| o >= generation)
    })
}

/// Reads every traced version with kstatus and checks each: at an observed generation exactly one of
/// Ready, Reconciling and Stalled is True; kstatus's reading is GKO's account; Current exactly when
/// `kubectl wait` would find Ready. Returns what was read ("<kstatus status> <step>"), each once in a row,
/// for the caller to check which moments the trace went through.
fn check_trace(exe: &Path, versions: &[Value]) -> anyhow::Result<Vec<String>> {
    let readings = kstatus(exe, versions)?;
    let mut seen = Vec::new();
    for (v, reading) in versions.iter().zip(&readings) {
        let g = typed(v)?;
        let (generation, observed) = generations(&g);
        let step = step_of(&g).map(|s| format!("{s:?}")).unwrap_or_default();
        let phase = g
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .map(|p| p.as_str())
            .unwrap_or_default();
        let at = format!(
            "generation {generation}, observed {observed:?}, phase {phase:?}, step {step:?}, \
             resourceVersion {}",
            g.metadata.resource_version.as_deref().unwrap_or_default()
        );
        if observed == Some(generation) {
            let trues: Vec<&str> = ["Ready", "Reconciling", "Stalled"]
                .into_iter()
                .filter(|t| is_true(&g, t))
                .collect();
            assert_eq!(trues.len(), 1, "{at}: True conditions {trues:?}");
        }
        assert_eq!(
            reading.status,
            gko_account(&g),
            "{at}: kstatus says {reading:?}; status {:#}",
            v["status"]
        );
        assert_eq!(
            reading.status == "Current",
            ready_met(&g),
            "{at}: kstatus says {reading:?}"
        );
        // Argo CD's health check reads the same version the same way.
        let (health, message) = argocd::argocd_health(v);
        let expected = match reading.status.as_str() {
            "Current" => "Healthy",
            "InProgress" => "Progressing",
            "Failed" => "Degraded",
            other => bail!("{at}: kstatus {other}"),
        };
        assert_eq!(
            health, expected,
            "{at}: Argo CD {health} ({message}), kstatus {reading:?}"
        );
        let label = format!("{} {}", reading.status, step);
        if seen.last() != Some(&label) {
            println!("  {at}: kstatus {} ({:?})", reading.status, reading.message);
            seen.push(label);
        }
    }
    Ok(seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kstatus_reads_an_update_in_progress_then_current() -> anyhow::Result<()> {
    let ns = namespace("kstatus-update").await?;
    let exe = kstatus_exe(&ns)?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({"drainTimeoutSeconds": 600}))?;

    // Applied, and no GKO has reported on it yet: in progress, not current (the CRD defaults
    // status.observedGeneration to 0), for kstatus and Argo CD alike.
    let (reading, g) = read_moment(&ns, &exe, "applied, no report yet", |g| {
        generations(g) == (1, Some(0)) && g.status.as_ref().is_some_and(|s| s.conditions.is_empty())
    })?;
    assert_eq!(reading.status, "InProgress", "{reading:?}");
    let (health, _) = argocd::argocd_health(&serde_json::to_value(&g)?);
    assert_eq!(health, "Progressing");

    let mut gko = Gko::spawn(&ns, GkoOptions::default())?;

    // Installed, and GKO reports it ready: Current.
    wait_ready(&ns).await?;
    let (reading, _) = read_moment(&ns, &exe, "installed and ready", |g| {
        let (generation, observed) = generations(g);
        observed == Some(generation) && step_of(g).is_none() && is_true(g, "Ready")
    })?;
    assert_eq!(reading.status, "Current", "{reading:?}");

    // spec.version changed while GKO is stopped: the status describes generation 1 of 2.
    gko.terminate()?;
    // Pipeline p00003 never pauses, so the update will wait in Drain until the test lets it go.
    sim.update_faults(|f| {
        f.stuck.insert("p00003".into());
    });
    patch_spec(&ns, json!({"version": "2.3.2.2"})).await?;
    let (reading, _) = read_moment(&ns, &exe, "spec changed, not yet seen", |g| {
        generations(g) == (2, Some(1))
    })?;
    assert_eq!(reading.status, "InProgress", "{reading:?}");
    assert_eq!(
        reading.message,
        "GluesyncPlatform generation is 2, but latest observed generation is 1"
    );

    // GKO back: the update starts and waits in Drain for p00003.
    let versions = trace(&ns);
    trace_started(&versions).await?;
    gko = Gko::spawn(&ns, GkoOptions::default())?;
    wait_for_step(&ns, UpdateStep::Drain).await?;
    gko_test_support::eventually(
        "every running pipeline asked into maintenance mode",
        Duration::from_secs(60),
        || async { Ok((sim.calls().enter.len() == 20).then_some(())) },
    )
    .await?;
    let (reading, g) = read_moment(&ns, &exe, "update waiting in Drain", |g| {
        generations(g) == (2, Some(2)) && step_of(g) == Some(UpdateStep::Drain)
    })?;
    assert_eq!(reading.status, "InProgress", "{reading:?}");
    let reconciling = condition(&g, "Reconciling").map(|c| (c.reason.as_str(), c.message.as_str()));
    assert_eq!(
        reconciling,
        Some(("UpdateDrain", reading.message.as_str())),
        "kstatus's message is GKO's Reconciling message"
    );

    // p00003 pauses: the update goes on and ends; Current again at generation 2.
    sim.update_faults(|f| f.stuck.clear());
    sim.set_maintenance("p00003", true);
    let g = wait_finished(&ns, 2).await?;
    let attempt = g
        .status
        .and_then(|s| s.last_attempt)
        .context("an attempt")?;
    assert_eq!(attempt.result, UpdateResult::Succeeded, "{attempt:?}");
    let (reading, _) = read_moment(&ns, &exe, "update finished", |g| {
        let (generation, observed) = generations(g);
        let status = g.status.as_ref();
        observed == Some(generation)
            && step_of(g).is_none()
            && status.and_then(|s| s.version.as_deref()) == Some("2.3.2.2")
            && status
                .and_then(|s| s.last_attempt.as_ref())
                .is_some_and(|a| a.generation == Some(2) && a.result == UpdateResult::Succeeded)
    })?;
    assert_eq!(reading.status, "Current", "{reading:?}");

    // Every version of the resource through the update.
    let versions = versions.lock().map(|v| v.clone()).unwrap_or_default();
    println!("every version a watch saw, from GKO's restart to the end:");
    let seen = check_trace(&exe, &versions)?;
    let labels: Vec<&str> = seen.iter().map(String::as_str).collect();
    // The steps that write a status of their own here (a Resume that Core Hub answers within 100 ms is
    // not written apart from the next step: see docs/development/benchmarks.md, "Where an update's time goes").
    for step in ["Drain", "CoreHub", "Modules"] {
        assert!(
            labels.contains(&format!("InProgress {step}").as_str()),
            "no version read in {step}: {labels:?}"
        );
    }
    assert_eq!(labels.last(), Some(&"Current "), "{labels:?}");
    drop(gko);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kstatus_reads_a_rolled_back_update_as_failed() -> anyhow::Result<()> {
    let ns = namespace("kstatus-failed").await?;
    let exe = kstatus_exe(&ns)?;
    let sim = simulator().await?;
    install_with_simulator(&ns, &sim, json!({}))?;
    // GKO stops acting right after it writes the status entering CoreHubRollback, so that moment holds.
    let mut gko = Gko::spawn(
        &ns,
        GkoOptions {
            env: vec![(
                "GKO_PAUSE_AFTER_STATUS_WRITE".into(),
                "CoreHubRollback".into(),
            )],
            ..Default::default()
        },
    )?;
    wait_ready(&ns).await?;
    let versions = trace(&ns);
    trace_started(&versions).await?;

    // A Core Hub that crash-loops: the stability check fails and the rollback begins.
    patch_spec(&ns, json!({"version": "2.3.2.2-crash"})).await?;
    gko.wait_for_line("fault point hit", Duration::from_secs(120))
        .await?;
    let (reading, _) = read_moment(&ns, &exe, "rolling back", |g| {
        generations(g) == (2, Some(2)) && step_of(g) == Some(UpdateStep::CoreHubRollback)
    })?;
    assert_eq!(reading.status, "InProgress", "{reading:?}");

    // GKO restarted: the rollback ends, and the failed update stays Failed until the spec changes.
    gko.kill()?;
    gko = Gko::spawn(&ns, GkoOptions::default())?;
    wait_finished(&ns, 2).await?;
    let (reading, g) = read_moment(&ns, &exe, "rolled back", |g| {
        let status = g.status.as_ref();
        generations(g) == (2, Some(2))
            && step_of(g).is_none()
            && status.and_then(|s| s.phase) == Some(Phase::Failed)
            && status.and_then(|s| s.version.as_deref()) == Some("2.3.2.1")
            && status
                .and_then(|s| s.last_attempt.as_ref())
                .is_some_and(|a| a.generation == Some(2) && a.result == UpdateResult::Failed)
    })?;
    assert_eq!(reading.status, "Failed", "{reading:?}");
    let stalled = condition(&g, "Stalled").context("a Stalled condition")?;
    assert_eq!(
        (
            stalled.status.as_str(),
            stalled.reason.as_str(),
            stalled.message.as_str()
        ),
        ("True", "UpdateFailed", reading.message.as_str())
    );
    assert!(reading.message.contains("CrashLoopBackOff"), "{reading:?}");
    assert_eq!(
        image_of(&ns, "statefulset", "gluesync-gluesync-core-hub").await?,
        "molo17/gluesync-core-hub:2.3.2.1"
    );

    // A new spec (back to the version that runs) clears it: Current at generation 3.
    patch_spec(&ns, json!({"version": "2.3.2.1"})).await?;
    wait_ready(&ns).await?;
    let (reading, _) = read_moment(&ns, &exe, "spec back to the running version", |g| {
        generations(g) == (3, Some(3)) && step_of(g).is_none()
    })?;
    assert_eq!(reading.status, "Current", "{reading:?}");

    let versions = versions.lock().map(|v| v.clone()).unwrap_or_default();
    println!("every version a watch saw, from before the failing update to the end:");
    let seen = check_trace(&exe, &versions)?;
    let labels: Vec<&str> = seen.iter().map(String::as_str).collect();
    for label in [
        "InProgress CoreHub",
        "InProgress CoreHubRollback",
        "Failed ",
        "Current ",
    ] {
        assert!(labels.contains(&label), "never read {label:?}: {labels:?}");
    }
    drop(gko);
    Ok(())
}
