//! `gko-bench`: GKO's figures on the local control plane, printed, never asserted.
//!
//! - reaction: a `spec.version` change to `status.phase=Updating`, p50 and p99 over 50 runs;
//! - drain and resume of 10,000 pipelines on the simulator;
//! - GKO's own overhead in a whole update (stability window 0, pods ready at once): the update's wall time
//!   less the time the API server and kwok take to roll the same images out without GKO;
//! - GKO's resident memory, idle and during the 10,000-pipeline update.
//!
//! GKO runs as its release binary (`target/release/gluesync-operator`, built by `make bench`), the
//! simulator in this process. Run with `make bench`.

use std::{
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use futures::StreamExt;
use gko_test_support::TestNamespace;
use gluesync_operator::api::{FIELD_MANAGER, GluesyncPlatform, Phase};
use gluesync_simulator::{Options, Simulator};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::{
    Api, CustomResourceExt,
    api::{Patch, PatchParams},
    runtime::watcher,
};
use serde_json::json;

const SAMPLE_INSTALL: &str = include_str!("../../../examples/sample/install.yaml");

struct Gko {
    child: Child,
    metrics_url: String,
}

impl Drop for Gko {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Gko {
    fn start(ns: &TestNamespace, port: u16) -> anyhow::Result<Gko> {
        Self::start_with(ns, port, "off")
    }

    fn start_with(ns: &TestNamespace, port: u16, conductor: &str) -> anyhow::Result<Gko> {
        let binary = ns.cp.repo_root.join("target/release/gluesync-operator");
        if !binary.exists() {
            bail!(
                "{} is missing: run `make bench`, which builds it",
                binary.display()
            );
        }
        let child = Command::new(binary)
            .args([
                "run",
                "--namespace",
                &ns.name,
                "--metrics-addr",
                &format!("127.0.0.1:{port}"),
                "--conductor-addr",
                conductor,
            ])
            .env("KUBECONFIG", &ns.cp.kubeconfig)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()?;
        Ok(Gko {
            child,
            metrics_url: format!("http://127.0.0.1:{port}/metrics"),
        })
    }

    /// Resident memory, from /proc.
    fn rss_kib(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
            })
            .unwrap_or(0)
    }

    /// The sum of one step's durations, from GKO's /metrics.
    async fn step_seconds(&self, step: &str) -> anyhow::Result<f64> {
        let text = reqwest::get(&self.metrics_url).await?.text().await?;
        let key = format!("gluesync_operator_update_step_duration_seconds_sum{{step=\"{step}\"}} ");
        Ok(text
            .lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0))
    }
}

async fn setup(hint: &str, sim: &Simulator, window: i64) -> anyhow::Result<TestNamespace> {
    let ns = TestNamespace::new(hint).await?;
    gko_test_support::install_crd(&ns.client, &GluesyncPlatform::crd(), FIELD_MANAGER).await?;
    ns.apply(SAMPLE_INSTALL)?;
    ns.apply("apiVersion: v1\nkind: Secret\nmetadata:\n  name: corehub-credentials\nstringData:\n  username: admin\n  password: admin\n")?;
    let doc = json!({
        "apiVersion": "gluesync.molo17.com/v1alpha1",
        "kind": "GluesyncPlatform",
        "metadata": {"name": "gluesync"},
        "spec": {
            "version": "2.3.2.1",
            "coreHub": {"url": sim.url, "credentialsSecret": "corehub-credentials"},
            "catalog": {"offline": true},
            "stabilityWindowSeconds": window,
            "stabilityTimeoutSeconds": 120,
            "drainTimeoutSeconds": 120,
        },
    });
    ns.apply(&doc.to_string())?;
    Ok(ns)
}

async fn wait_for(
    api: &Api<GluesyncPlatform>,
    what: &str,
    f: impl Fn(&GluesyncPlatform) -> bool,
) -> anyhow::Result<GluesyncPlatform> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let g = api.get("gluesync").await?;
        if f(&g) {
            return Ok(g);
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn current(g: &GluesyncPlatform) -> bool {
    g.status
        .as_ref()
        .is_some_and(|s| s.phase == Some(Phase::Current))
}

fn finished(generation: i64) -> impl Fn(&GluesyncPlatform) -> bool {
    move |g| {
        g.status.as_ref().is_some_and(|s| {
            s.update.is_none()
                && s.last_attempt.as_ref().and_then(|a| a.generation) == Some(generation)
        })
    }
}

async fn set_version(api: &Api<GluesyncPlatform>, version: &str) -> anyhow::Result<i64> {
    let g = api
        .patch(
            "gluesync",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": version}})),
        )
        .await?;
    Ok(g.metadata.generation.unwrap_or(0))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// A `spec.version` change to phase Updating, seen through a watch.
async fn reaction(runs: usize) -> anyhow::Result<()> {
    let sim = Simulator::start(Options::default()).await?;
    sim.add_pipelines("p", 20);
    let ns = setup("bench-reaction", &sim, 0).await?;
    let gko = Gko::start(&ns, 18181)?;
    let api: Api<GluesyncPlatform> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(&api, "phase Current", current).await?;

    // Watch the platform; note when each generation is first seen Updating.
    let seen: Arc<AtomicU64> = Arc::new(AtomicU64::new(0));
    let at = Arc::new(std::sync::Mutex::new(Vec::<(i64, Instant)>::new()));
    let (seen2, at2) = (seen.clone(), at.clone());
    let watch_api = api.clone();
    let watching = tokio::spawn(async move {
        let mut stream = watcher(watch_api, watcher::Config::default()).boxed();
        while let Some(Ok(ev)) = stream.next().await {
            if let watcher::Event::Apply(g) = ev
                && let Some(u) = g.status.as_ref().and_then(|s| s.update.as_ref())
                && g.status.as_ref().and_then(|s| s.phase) == Some(Phase::Updating)
                && u.generation as u64 > seen2.load(Ordering::SeqCst)
            {
                seen2.store(u.generation as u64, Ordering::SeqCst);
                if let Ok(mut v) = at2.lock() {
                    v.push((u.generation, Instant::now()));
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut latencies = vec![];
    for i in 0..runs {
        let version = if i % 2 == 0 { "2.3.2.2" } else { "2.3.2.1" };
        let sent = Instant::now();
        let generation = set_version(&api, version).await?;
        wait_for(&api, "the update to finish", finished(generation)).await?;
        let when = at
            .lock()
            .map_err(|_| anyhow::anyhow!("lock"))?
            .iter()
            .find(|(g, _)| *g == generation)
            .map(|(_, t)| *t)
            .context("the watch never saw phase Updating")?;
        latencies.push(when.duration_since(sent).as_secs_f64() * 1000.0);
    }
    watching.abort();
    latencies.sort_by(f64::total_cmp);
    println!(
        "reaction (spec.version change -> phase Updating, {runs} runs): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or(0.0)
    );
    drop(gko);
    Ok(())
}

/// The time the API server and kwok take to roll out Core Hub's new image, without GKO.
async fn rollout_without_gko(ns: &TestNamespace, image: &str) -> anyhow::Result<f64> {
    let sts: Api<StatefulSet> = Api::namespaced(ns.client.clone(), &ns.name);
    let start = Instant::now();
    sts.patch(
        "gluesync-gluesync-core-hub",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [{"name": "core-hub", "image": image}]}}}})),
    )
    .await?;
    loop {
        let s = sts.get("gluesync-gluesync-core-hub").await?;
        let w = gluesync_operator::cluster::Workload::from_statefulset(&s).context("labelled")?;
        if w.ready && w.image == image {
            return Ok(start.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A whole update with 20 pipelines, window 0: GKO's time beyond the rollout's own.
async fn overhead(runs: usize) -> anyhow::Result<()> {
    let sim = Simulator::start(Options::default()).await?;
    sim.add_pipelines("p", 20);
    let ns = setup("bench-overhead", &sim, 0).await?;
    let gko = Gko::start(&ns, 18182)?;
    let api: Api<GluesyncPlatform> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(&api, "phase Current", current).await?;
    let mut totals = vec![];
    for i in 0..runs {
        let version = if i % 2 == 0 { "2.3.2.2" } else { "2.3.2.1" };
        let start = Instant::now();
        let generation = set_version(&api, version).await?;
        wait_for(&api, "the update", finished(generation)).await?;
        totals.push(start.elapsed().as_secs_f64());
    }
    drop(gko);
    // The same rollouts with nobody but the API server and kwok.
    let mut rollouts = vec![];
    for i in 0..runs {
        let version = if i % 2 == 0 { "2.3.2.2" } else { "2.3.2.1" };
        rollouts
            .push(rollout_without_gko(&ns, &format!("molo17/gluesync-core-hub:{version}")).await?);
    }
    totals.sort_by(f64::total_cmp);
    rollouts.sort_by(f64::total_cmp);
    let (t, r) = (percentile(&totals, 0.5), percentile(&rollouts, 0.5));
    println!(
        "whole update (20 pipelines, window 0, {runs} runs): median {:.0} ms; the same rollout without GKO: median {:.0} ms; GKO's overhead: {:.0} ms",
        t * 1000.0,
        r * 1000.0,
        (t - r) * 1000.0
    );
    Ok(())
}

/// Drain and resume of 10,000 pipelines, and GKO's memory idle and during that update.
async fn ten_thousand() -> anyhow::Result<()> {
    let sim = Simulator::start(Options::default()).await?;
    sim.add_pipelines("p", 10_000);
    let ns = setup("bench-10k", &sim, 0).await?;
    let gko = Gko::start(&ns, 18183)?;
    let api: Api<GluesyncPlatform> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(&api, "phase Current", current).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = gko.rss_kib();

    let peak = Arc::new(AtomicU64::new(0));
    let running = Arc::new(AtomicBool::new(true));
    let pid = gko.child.id();
    let (p2, r2) = (peak.clone(), running.clone());
    let sampler = tokio::spawn(async move {
        while r2.load(Ordering::SeqCst) {
            let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("VmRSS:"))
                        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
                })
                .unwrap_or(0u64);
            p2.fetch_max(rss, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let start = Instant::now();
    let generation = set_version(&api, "2.3.2.2").await?;
    let g = wait_for(&api, "the 10,000-pipeline update", finished(generation)).await?;
    let total = start.elapsed();
    running.store(false, Ordering::SeqCst);
    let _ = sampler.await;
    let attempt = g
        .status
        .and_then(|s| s.last_attempt)
        .context("no last attempt")?;
    if attempt.resumed_pipelines.len() != 10_000 || !sim.in_maintenance().is_empty() {
        bail!(
            "the update did not pause and resume all 10,000 pipelines: {:?}",
            attempt.result
        );
    }
    println!(
        "10,000 pipelines: drain {:.2} s, resume {:.2} s, whole update {:.2} s ({:?})",
        gko.step_seconds("Drain").await?,
        gko.step_seconds("Resume").await?,
        total.as_secs_f64(),
        attempt.result
    );
    println!(
        "resident memory: idle {:.1} MiB, peak during the 10,000-pipeline update {:.1} MiB",
        idle as f64 / 1024.0,
        peak.load(Ordering::SeqCst) as f64 / 1024.0
    );
    Ok(())
}

/// `GET /containers` of the Conductor API with a cached token: requests per second.
async fn conductor_load(seconds: u64, concurrency: usize) -> anyhow::Result<()> {
    let sim = Simulator::start(Options::default()).await?;
    let ns = setup("bench-conductor", &sim, 0).await?;
    let gko = Gko::start_with(&ns, 18184, "127.0.0.1:18185")?;
    let api: Api<GluesyncPlatform> = Api::namespaced(ns.client.clone(), &ns.name);
    wait_for(&api, "phase Current", current).await?;
    let token = sim.token_for("viewer");
    let http = reqwest::Client::new();
    let url = "http://127.0.0.1:18185/conductor/api/containers";
    // The first call fills the token cache.
    let first = http.get(url).bearer_auth(&token).send().await?;
    if !first.status().is_success() {
        bail!("GET /containers answered {}", first.status());
    }
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = vec![];
    for _ in 0..concurrency {
        let (http, token, done, failed) =
            (http.clone(), token.clone(), done.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                match http.get(url).bearer_auth(&token).send().await {
                    Ok(r) if r.status().is_success() => {
                        let _ = r.bytes().await;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let n = done.load(Ordering::Relaxed);
    println!(
        "Conductor API GET /containers with a cached token ({concurrency} connections, {seconds} s): {:.0} requests/s, {} failed, {} Core Hub identity checks",
        n as f64 / seconds as f64,
        failed.load(Ordering::Relaxed),
        sim.calls().me
    );
    drop(gko);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let which: Vec<String> = std::env::args().skip(1).collect();
    let all = which.is_empty();
    let wants = |name: &str| all || which.iter().any(|w| w == name);
    gko_test_support::control_plane();
    if wants("reaction") {
        reaction(50).await?;
    }
    if wants("overhead") {
        overhead(10).await?;
    }
    if wants("pipelines") {
        ten_thousand().await?;
    }
    if wants("conductor") {
        conductor_load(5, 16).await?;
    }
    Ok(())
}
